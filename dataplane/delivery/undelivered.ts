// What a destination's consumer still had to deliver, when the consumer is removed (the destination
// disabled or deleted) or a source leaves its filter: the messages that nothing else would bring
// back go to the dead-letter queue first. Its events stay in the events stream (until max_age) and
// a disabled destination means "send nothing more"; but a delete notification still being retried
// is a user's erasure that would vanish without a trace (found by a review: a team disabled a
// failing receiver for a minute, and the notice was gone, no dead letter, no metric), and a
// replayed dead letter left the DLQ for this one consumer.
import type { ConsumerInfo, JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { EVENTS_STREAM, dlqSubject, isConsumerNotFound, isStreamNotFound, parseConsumerName, readStored } from "../nats/mod.ts";
import { deadLetterOptions } from "./dead-letter.ts";
import type { DeadLetterReason } from "./metrics.ts";

export interface UndeliveredMoved {
  /** Delete notifications moved to the DLQ. */
  deletes: number;
  /** Replayed dead letters moved back to the DLQ. */
  replayed: number;
}

/**
 * Copies a destination consumer's undelivered delete notifications and replayed dead letters to the
 * DLQ, before the consumer is removed (or, given `only`, the delete notifications of those source
 * filters, before they leave the consumer's filter). "Undelivered" is what lies past its ack floor:
 * a message acked out of order there (delivered) is copied too, and a replay of it sends it again
 * with the same messageId and X-Delivery-Id, which receivers drop. A dead letter is keyed as
 * delivery keys its own, so one that delivery stored a moment before is not stored twice.
 */
export async function deadLetterUndelivered(
  jsm: JetStreamManager,
  js: JetStreamClient,
  /** The consumer's name, or its info when the caller has just read it. */
  consumer: string | ConsumerInfo,
  reason: Extract<DeadLetterReason, "destination_disabled" | "destination_deleted" | "source_removed">,
  /** Of the consumer's filters, only these (the sources leaving it); all of them by default. */
  only?: readonly string[],
): Promise<UndeliveredMoved> {
  const moved: UndeliveredMoved = { deletes: 0, replayed: 0 };
  const owner = parseConsumerName(typeof consumer === "string" ? consumer : consumer.name);
  if (!owner) return moved;
  const info = typeof consumer !== "string" ? consumer : await jsm.consumers.info(EVENTS_STREAM, consumer).catch((err: Error) => {
    if (isConsumerNotFound(err) || isStreamNotFound(err)) return undefined;
    throw err;
  });
  if (!info || info.num_pending + info.num_ack_pending === 0) return moved;
  const filters = (info.config.filter_subjects ?? (info.config.filter_subject ? [info.config.filter_subject] : [])).filter((f) => !only || only.includes(f));
  // A source's delete notifications, and the replay subject as it is.
  const subjects = filters.map((subject) => (subject.startsWith("trackhook.events.") && subject.endsWith(".>") ? `${subject.slice(0, -1)}delete` : subject));
  if (subjects.length === 0) return moved;
  const label = `${owner.namespace}/${owner.destination}`;
  const target = dlqSubject(owner.namespace, owner.destination);
  // One subject per reader: a consumer of one filter is created on a subject naming it, which the
  // documented NATS permissions allow delivery (docs/nats-permissions.conf); several use the bare
  // create subject (found by a review).
  for (const subject of subjects) {
    for await (const m of readStored(js, EVENTS_STREAM, subject, { startSeq: info.ack_floor.stream_seq + 1, whole: true })) {
      await js.publish(target, m.data, deadLetterOptions(m, label, reason, 0));
      if (m.subject.startsWith("trackhook.replay.")) moved.replayed++;
      else moved.deletes++;
    }
  }
  return moved;
}
