// The first delivery on a NATS, for `deliver --config` and `dev`: what the ingest accepted before
// delivery first ran belongs to the destinations in the files then, whenever their files were
// written. The operator's destinations say when they came (status.deliveringSince); files cannot
// (`cp -p`, rsync, tar and an image's COPY keep old times), so the decision is written in NATS,
// beside the attempt records, where every delivery process reads it:
// - the first process writes an `owed` mark for each enabled destination in its files, before it
//   makes any consumer;
// - whichever process then makes an owed destination's consumer starts it at the events stream's
//   first message and writes `made`, so that the destination, disabled and enabled again later,
//   starts from then like any other.
// Decided in one process's memory, a second process started beside it (or the same one restarted
// after a crash halfway) found some consumers made, took itself for a later start, and made the
// rest from now: 66 of 100 destinations skipped the backlog in a review.
import type { CompiledDestination } from "../../schema/mod.ts";
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { ATTEMPT_RECORD_SUBJECTS, ATTEMPTS_STREAM, EVENTS_STREAM, consumerName, firstDeliverySubject, hasMessagesOn, isConsumerNotFound } from "../nats/mod.ts";

/**
 * Whether no delivery has happened on this NATS yet: no attempt was recorded, and none of the
 * destinations has a consumer. (Asked by name: delivery's NATS user may not list consumers, and
 * the stream's consumer count includes a `tail` someone runs meanwhile.) Two processes started
 * together may both answer yes: both write their marks, which is the same as one writing them.
 */
export async function isFirstDelivery(jsm: JetStreamManager, destinations: readonly CompiledDestination[]): Promise<boolean> {
  const attempts = await jsm.streams.info(ATTEMPTS_STREAM);
  if (attempts.state.messages > 0 && (await hasMessagesOn(jsm, ATTEMPTS_STREAM, ATTEMPT_RECORD_SUBJECTS))) return false;
  for (const { namespace, name } of destinations) {
    const exists = await jsm.consumers.info(EVENTS_STREAM, consumerName(namespace, name)).then(() => true, (err: unknown) => {
      if (isConsumerNotFound(err)) return false;
      throw err;
    });
    if (exists) return false;
  }
  return true;
}

/** Writes the destinations' `owed` marks, each acknowledged by JetStream, before any consumer is made. */
export async function markOwed(js: JetStreamClient, destinations: readonly CompiledDestination[]): Promise<void> {
  // In slices: a thousand destinations are a thousand publishes, not a thousand at once.
  for (let i = 0; i < destinations.length; i += MARKS_AT_ONCE) {
    await Promise.all(destinations.slice(i, i + MARKS_AT_ONCE).map(({ namespace, name }) => js.publish(firstDeliverySubject(namespace, name, "owed"))));
  }
}

const MARKS_AT_ONCE = 100;

/**
 * Whether the destination's consumer, made now, reads the events stream from its first message:
 * owed (marked, or `markedHere` by the caller), and not made before.
 */
export async function owesWholeStream(jsm: JetStreamManager, { namespace, name }: CompiledDestination, markedHere = false): Promise<boolean> {
  const info = await jsm.streams.info(ATTEMPTS_STREAM, { subjects_filter: firstDeliverySubject(namespace, name, "*") });
  const marks = (info.state.subjects ?? {}) as Record<string, number>;
  return (markedHere || (marks[firstDeliverySubject(namespace, name, "owed")] ?? 0) > 0) && (marks[firstDeliverySubject(namespace, name, "made")] ?? 0) === 0;
}

/** Writes the destination's `made` mark, once its owed consumer is made. */
export async function markMade(js: JetStreamClient, { namespace, name }: CompiledDestination): Promise<void> {
  await js.publish(firstDeliverySubject(namespace, name, "made"));
}
