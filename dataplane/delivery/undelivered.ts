// What a destination's consumer still had to deliver, when the consumer is removed (the
// destination disabled or deleted): the messages that nothing else would bring back go to the
// dead-letter queue first. Its events stay in the events stream (until max_age) and a disabled
// destination means "send nothing more"; but a delete notification still being retried is a
// user's erasure that would vanish without a trace (found by a review: a team disabled a failing
// receiver for a minute, and the notice was gone, no dead letter, no metric), and a replayed dead
// letter left the DLQ for this one consumer.
import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { DEAD_LETTER_HEADERS, EVENTS_STREAM, dlqSubject, isConsumerNotFound, isStreamNotFound, parseConsumerName } from "../nats/mod.ts";
import type { DeadLetterReason } from "./metrics.ts";

export interface UndeliveredMoved {
  /** Delete notifications moved to the DLQ. */
  deletes: number;
  /** Replayed dead letters moved back to the DLQ. */
  replayed: number;
}

/** Pages of this many messages are read past the consumer's ack floor. */
const PAGE = 256;

/**
 * Copies a destination consumer's undelivered delete notifications and replayed dead letters to
 * the DLQ, before the consumer is removed. "Undelivered" is what lies past its ack floor: a
 * message acked out of order there (delivered) is copied too, and a replay of it sends it again
 * with the same messageId and X-Delivery-Id, which receivers drop. A dead letter is keyed as
 * delivery keys its own, so one that delivery stored a moment before is not stored twice.
 */
export async function deadLetterUndelivered(
  jsm: JetStreamManager,
  js: JetStreamClient,
  consumer: string,
  reason: Extract<DeadLetterReason, "destination_disabled" | "destination_deleted">,
): Promise<UndeliveredMoved> {
  const moved: UndeliveredMoved = { deletes: 0, replayed: 0 };
  const owner = parseConsumerName(consumer);
  if (!owner) return moved;
  const info = await jsm.consumers.info(EVENTS_STREAM, consumer).catch((err: Error) => {
    if (isConsumerNotFound(err) || isStreamNotFound(err)) return undefined;
    throw err;
  });
  if (!info || info.num_pending + info.num_ack_pending === 0) return moved;
  const filters = info.config.filter_subjects ?? (info.config.filter_subject ? [info.config.filter_subject] : []);
  // A source's delete notifications, and the replay subject as it is.
  const subjects = filters.map((subject) => (subject.startsWith("trackhook.events.") && subject.endsWith(".>") ? `${subject.slice(0, -1)}delete` : subject));
  if (subjects.length === 0) return moved;
  const label = `${owner.namespace}/${owner.destination}`;
  const target = dlqSubject(owner.namespace, owner.destination);
  // One subject per reader: a consumer of one filter is created on a subject naming it, which the
  // documented NATS permissions allow delivery (docs/nats-permissions.conf); several use the bare
  // create subject (found by a review).
  for (const subject of subjects) {
    const reader = await js.consumers.get(EVENTS_STREAM, { filter_subjects: subject, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: info.ack_floor.stream_seq + 1 });
    try {
      // Nothing of it past the floor (a source with no delete notification): no fetch to wait out.
      if ((await reader.info(true)).num_pending === 0) continue;
      for (;;) {
        let last = true;
        const page = await reader.fetch({ max_messages: PAGE, expires: 1_000 });
        for await (const m of page) {
          const h = natsHeaders();
          h.set(DEAD_LETTER_HEADERS.reason, reason);
          h.set(DEAD_LETTER_HEADERS.attempts, "0");
          h.set(DEAD_LETTER_HEADERS.destination, label);
          h.set(DEAD_LETTER_HEADERS.originalSubject, m.headers?.get(DEAD_LETTER_HEADERS.originalSubject) || m.subject);
          await js.publish(target, m.data, { headers: h, msgID: `${label}/${m.seq}/${m.info.timestampNanos}` });
          if (m.subject.startsWith("trackhook.replay.")) moved.replayed++;
          else moved.deletes++;
          last = m.info.pending === 0;
        }
        if (last) break;
      }
    } finally {
      await reader.delete().catch(() => {});
    }
  }
  return moved;
}
