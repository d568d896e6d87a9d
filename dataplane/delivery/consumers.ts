// One durable pull consumer per WebhookDestination on TRACKHOOK_EVENTS, filtering the subjects
// of its sources plus its own replay subject. `deliver`/`dev` manage them from config today and
// the operator will call the same functions.
import { AckPolicy, DeliverPolicy, type ConsumerConfig, type ConsumerInfo, type JetStreamManager, type MsgRequest } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import type { CompiledDestination } from "../../schema/mod.ts";
import { EVENTS_STREAM, consumerName, isConsumerNotFound, isStreamNotFound, replaySubject, sourceSubjects } from "../nats/mod.ts";
import { deadLetterUndelivered, type UndeliveredMoved } from "./undelivered.ts";

/**
 * ack_wait must outlast the worst delivery round (all URLs in parallel, each bounded by the
 * timeout) plus recording attempts or a dead letter, so a message in flight is never redelivered
 * while it is still being sent.
 */
export function ackWaitMs(destination: CompiledDestination): number {
  return destination.timeoutMs + 30_000;
}

/**
 * Where a new consumer starts. A destination that has never delivered receives what arrives from
 * its creation on (its config's createdAt), not the stream's whole history: its consumer is made
 * moments later (by the operator or `deliver`), or much later (its Secret came late), and what
 * was stored meanwhile (events sent at once, the delete notification of a DeletionRequest applied
 * with it) would otherwise never reach it. Without createdAt (one that has delivered before, and
 * is enabled again), from now.
 */
function deliverFrom(destination: CompiledDestination): Pick<ConsumerConfig, "deliver_policy" | "opt_start_time"> {
  const created = destination.createdAt ? Date.parse(destination.createdAt) : NaN;
  if (Number.isNaN(created)) return { deliver_policy: DeliverPolicy.New };
  // From createdAt alone, so the operator and every delivery pod ask for the same consumer.
  return { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(created).toISOString() };
}

export function destinationConsumerConfig(destination: CompiledDestination): Partial<ConsumerConfig> & { durable_name: string } {
  const { namespace, name } = destination;
  return {
    durable_name: consumerName(namespace, name),
    filter_subjects: [...destination.sources.map((source) => sourceSubjects(namespace, source)), replaySubject(namespace, name)],
    ack_policy: AckPolicy.Explicit,
    ...deliverFrom(destination),
    ack_wait: nanos(ackWaitMs(destination)),
    // The destination's concurrency: messages waiting for a retry count too, so a dead endpoint
    // fills its own window and stalls only itself.
    max_ack_pending: destination.maxInFlight,
    max_deliver: -1,
  };
}

/** What became of the sources that left a destination's filter (ensureDestinationConsumer). */
export type SourcesRemoved =
  | { filters: string[]; narrowed: true; moved: UndeliveredMoved }
  | { filters: string[]; narrowed: boolean; error: Error };

/** Where a consumer made by ensureDestinationConsumer starts: as configured (or at resumeAt), or all of the stream. */
export type ConsumerMade =
  | { from: "config" }
  /** The events stream is younger than the destination's deliveringSince. */
  | { from: "stream-start"; streamCreated: string; pending: number };

const FROM_STREAM_START =
  "the destination's consumer was missing and the events stream is younger than the destination (a NATS store lost, or a move to another NATS): made from the stream's first message, so nothing stored since is skipped (what was delivered before may arrive again, with the same messageId)";
const FIRST_DELIVERY_CONSUMER = "the destination's consumer is made from the events stream's first message: the first delivery on this NATS";

/**
 * How a consumer made now starts, when the caller knows more than the destination says:
 * `wholeStream`, from the events stream's first message (everything in it is the destination's).
 */
export interface ConsumerToMake {
  destination: CompiledDestination;
  wholeStream?: boolean;
}

/**
 * Where a consumer made again for a destination enabled without a break starts, when its
 * consumer is missing (a NATS whose store was lost, a move to another NATS, a `nats consumer rm`
 * while no delivery ran). From now (the default for one that has delivered before) would skip
 * what ingest stored in between, silently (found by a disaster-recovery review). When the stream
 * itself is younger than the destination's deliveringSince, all of it arrived while the
 * destination was meant to receive it: from its start. An older stream says nothing about when
 * the consumer went (or whether it was removed on purpose): from the configured start.
 */
async function streamYoungerThanDestination(jsm: JetStreamManager, destination: CompiledDestination): Promise<string | undefined> {
  // A destination not yet in effect starts at its creation (createdAt), which covers a younger
  // stream already; said as a store lost, it misled on a fresh install (found by a review).
  if (destination.createdAt !== undefined) return undefined;
  const since = destination.deliveringSince ? Date.parse(destination.deliveringSince) : NaN;
  if (Number.isNaN(since)) return undefined;
  const { created } = await jsm.streams.info(EVENTS_STREAM);
  return Date.parse(created) > since ? created : undefined;
}

/**
 * Where a consumer made again after it was lost under delivery starts: after the last message it
 * acked (a stream sequence), or, when the stream's sequence went back (restored from a backup),
 * at a time.
 */
export type ResumePoint = { seq: number } | { time: string };

/**
 * Creates the destination's consumer, or updates its filters and limits in place. `resumeAt`
 * overrides where a consumer made now starts (one recreated after it was deleted under delivery).
 */
export async function ensureDestinationConsumer(
  jsm: JetStreamManager,
  destination: CompiledDestination,
  options: {
    resumeAt?: ResumePoint;
    /** When this process first wanted the consumer: where one made without createdAt starts (rather than now). */
    firstWanted?: string;
    /** How a consumer made now should start (asked only when it must be made). */
    madeAs?: (destination: CompiledDestination) => Promise<ConsumerToMake>;
    /** Told when this call made the consumer (not another process), and where it starts. */
    onCreated?: (made: ConsumerMade) => void;
    /** Where a consumer made from the stream's start is said (by whichever process made it). */
    log?: { warn(fields: object, msg: string): void; info(fields: object, msg: string): void };
    /** Told what happened when sources left the filter (see below). */
    onSourcesRemoved?: (removed: SourcesRemoved) => void;
    /** When their notices cannot be moved (the DLQ full): narrow the filter anyway (true), or keep it (the default). */
    dropUndelivered?: boolean;
  } = {},
): Promise<string> {
  const configOf = (d: CompiledDestination) => {
    const base = destinationConsumerConfig(options.firstWanted && !d.createdAt ? { ...d, createdAt: options.firstWanted } : d);
    const at = options.resumeAt;
    if (at === undefined) return base;
    return "seq" in at
      ? { ...base, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: at.seq, opt_start_time: undefined }
      : { ...base, deliver_policy: DeliverPolicy.StartTime, opt_start_time: at.time };
  };
  const config = configOf(destination);
  const info = () =>
    jsm.consumers.info(EVENTS_STREAM, config.durable_name).catch((err: Error) => {
      if (isConsumerNotFound(err)) return undefined;
      throw err;
    });
  let existing = await info();
  if (!existing) {
    const { destination: target, wholeStream } = options.madeAs ? await options.madeAs(destination) : { destination };
    const streamCreated = options.resumeAt !== undefined
      ? undefined
      : wholeStream ? (await jsm.streams.info(EVENTS_STREAM)).created : await streamYoungerThanDestination(jsm, target);
    const toMake = configOf(target);
    try {
      const made = await jsm.consumers.add(EVENTS_STREAM, streamCreated ? { ...toMake, deliver_policy: DeliverPolicy.All, opt_start_time: undefined } : toMake);
      if (streamCreated) {
        const { namespace, name, deliveringSince } = destination;
        if (wholeStream) options.log?.info({ destination: `${namespace}/${name}`, pending: made.num_pending }, FIRST_DELIVERY_CONSUMER);
        else options.log?.warn({ destination: `${namespace}/${name}`, streamCreated, deliveringSince, pending: made.num_pending }, FROM_STREAM_START);
      }
      options.onCreated?.(streamCreated ? { from: "stream-start", streamCreated, pending: made.num_pending } : { from: "config" });
    } catch (err) {
      // The operator and the delivery pods may all create it at once; one wins, the others update.
      existing = await info();
      if (!existing) throw err;
    }
  }
  if (existing) {
    // Where it started is fixed at creation.
    const { deliver_policy: _policy, opt_start_time: _start, opt_start_seq: _seq, ...mutable } = config;
    const differsFrom = (wanted: typeof mutable) => (Object.keys(wanted) as Array<keyof typeof wanted>).some(
      (key) => JSON.stringify(existing.config[key]) !== JSON.stringify(wanted[key]),
    );
    if (!differsFrom(mutable)) return config.durable_name;
    // A source leaving the filter takes its messages not yet delivered with it, unsent; its delete
    // notifications (user erasures) go to the DLQ first (found by a review: a destination moved
    // to another source in Git dropped a pending erasure, with no trace). When they cannot be
    // moved (the DLQ full), the filter stays as it was: the destination goes on delivering, the
    // leaving sources too, and the caller tries again later; throwing would stop the whole
    // destination (found by a review).
    const wanted = new Set(mutable.filter_subjects);
    const leaving = (existing.config.filter_subjects ?? []).filter((f) => f.startsWith("trackhook.events.") && !wanted.has(f));
    if (leaving.length > 0) {
      try {
        const moved = await deadLetterUndelivered(jsm, jsm.jetstream(), existing, "source_removed", leaving);
        options.onSourcesRemoved?.({ filters: leaving, moved, narrowed: true });
      } catch (err) {
        options.onSourcesRemoved?.({ filters: leaving, error: err as Error, narrowed: options.dropUndelivered === true });
        if (!options.dropUndelivered) {
          // Only what does not narrow the filter (limits, ack_wait) changes meanwhile.
          const kept = { ...mutable, filter_subjects: existing.config.filter_subjects ?? mutable.filter_subjects };
          if (differsFrom(kept)) await jsm.consumers.update(EVENTS_STREAM, config.durable_name, kept);
          return config.durable_name;
        }
      }
    }
    await jsm.consumers.update(EVENTS_STREAM, config.durable_name, mutable);
  }
  return config.durable_name;
}

/**
 * Deletes the named destination consumers; one already gone counts as deleted, and so do all when
 * the stream itself is gone (a finalizer must not wait for a stream that will never come back).
 */
export async function removeDestinationConsumers(jsm: JetStreamManager, names: Iterable<string>): Promise<number> {
  let removed = 0;
  for (const name of names) {
    const deleted = await jsm.consumers.delete(EVENTS_STREAM, name).catch((err: Error) => {
      if (!isConsumerNotFound(err) && !isStreamNotFound(err)) throw err;
      return false;
    });
    if (deleted) removed++;
  }
  return removed;
}

/**
 * When the oldest message a destination's consumer has not acked was stored: the first message of
 * its subjects after its ack floor (every one below the floor is acked, and the floor stops at the
 * first that is not). One stream read per filter subject; undefined when none waits. A failed read
 * rejects, where reading it as "none" would report a younger backlog.
 */
export async function oldestWaitingAt(jsm: JetStreamManager, info: ConsumerInfo): Promise<Date | undefined> {
  const filters = info.config.filter_subjects ?? (info.config.filter_subject ? [info.config.filter_subject] : []);
  const seq = info.ack_floor.stream_seq + 1;
  const firsts = await Promise.all(
    // STREAM.MSG.GET takes next_by_subj with seq (the first match at or after it; null when there
    // is none); nats.js types it for direct gets only, which the stream does not allow.
    filters.map((subject) => jsm.streams.getMessage(EVENTS_STREAM, { seq, next_by_subj: subject } as unknown as MsgRequest)),
  );
  let oldest: Date | undefined;
  for (const m of firsts) if (m && (oldest === undefined || m.time < oldest)) oldest = m.time;
  return oldest;
}
