// `trackhook dead-letters`, `replay` and a deletion's purge: a destination's dead letters read,
// moved back for delivery to that destination only, or removed.
import { jetstream, jetstreamManager, type ConsumerInfo, type JetStreamClient, type JetStreamManager, type JsMsg } from "@nats-io/jetstream";
import { headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import { parseJson } from "../json.ts";
import { DEAD_LETTER_HEADERS, DLQ_STREAM, EVENTS_STREAM, consumerName, dlqSubject, isConsumerNotFound, isStreamNotFound, replaySubject, sourceOfEventSubject, readStored, streamLastSeq } from "../nats/mod.ts";
import { checkDestinationRef, checkName, type DestinationRef } from "./names.ts";

/** Which of a destination's dead letters `replay` moves and `dead-letters` lists. */
export interface DeadLetterSelection extends DestinationRef {
  /** Only dead letters stored within this many milliseconds of now. */
  sinceMs?: number;
  /** Only the dead letters of this message (its `messageId`). */
  messageId?: string;
  /** At most this many dead letters (of those selected), oldest first. */
  limit?: number;
}

/** A replay that stopped part-way (a publish or delete failed); the messages before it were moved. */
export class ReplayInterruptedError extends Error {
  readonly replayed: number;
  constructor(replayed: number, cause: unknown) {
    super(`replay stopped after ${replayed} message(s): ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = "ReplayInterruptedError";
    this.replayed = replayed;
  }
}

/** The destination cannot receive a replay: nothing was moved. */
export class ReplayTargetError extends Error {
  override name = "ReplayTargetError";
}

/**
 * Moves a destination's dead letters back for delivery to that destination only: each DLQ body is
 * published to `trackhook.replay.<ns>.<dest>` (which only that destination's consumer reads) and the
 * dead letter is deleted after the stream acknowledged the copy. The copy's Nats-Msg-Id names the
 * dead letter, so two replays racing (or a retry after a crash between publish and delete) store it
 * once within the events stream's duplicate window.
 */
export async function replayDeadLetters(
  nc: NatsConnection,
  options: DeadLetterSelection & {
    onProgress?: (replayed: number) => void;
    /** Stops taking dead letters; those being moved finish, then ReplayInterruptedError says how many moved. */
    signal?: AbortSignal;
    /**
     * Dead letters moved per second at most; without it, as fast as REPLAY_IN_FLIGHT at once allow.
     * A replay shares NATS and the delivery pods with every other destination: a review's 30,000
     * moved in 15 s took another tenant's delivery p99 from 25 to 392 ms meanwhile.
     */
    perSecond?: number;
  },
): Promise<{ replayed: number }> {
  const { namespace, destination } = options;
  checkDestinationRef({ namespace, destination });
  if (options.limit !== undefined && options.limit <= 0) return { replayed: 0 };
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);

  // A replay subject nobody consumes would take the messages out of the DLQ and deliver nothing.
  const consumer = await destinationConsumer(nc, options);
  const replay = replaySubject(namespace, destination);
  if (!consumer) {
    throw new ReplayTargetError(
      `destination ${namespace}/${destination} has no consumer on ${EVENTS_STREAM}: is there an enabled WebhookDestination of that name, ` +
        `with \`trackhook dev\`, \`trackhook deliver\` or the operator running for it? Nothing was replayed`,
    );
  }
  const filters = consumer.config.filter_subjects ?? (consumer.config.filter_subject ? [consumer.config.filter_subject] : []);
  if (!filters.includes(replay)) {
    throw new ReplayTargetError(`the consumer of ${namespace}/${destination} does not read ${replay}; restart \`trackhook deliver\` to update it; nothing was replayed`);
  }

  const lastSeq = await streamLastSeq(jsm, DLQ_STREAM);
  if (lastSeq === undefined) return { replayed: 0 };
  let replayed = 0;
  const move = async (m: JsMsg): Promise<void> => {
    const h = natsHeaders();
    h.set(DEAD_LETTER_HEADERS.replayOf, String(m.seq));
    const original = m.headers?.get(DEAD_LETTER_HEADERS.originalSubject);
    if (original) h.set(DEAD_LETTER_HEADERS.originalSubject, original);
    await js.publish(replay, m.data, { headers: h, msgID: `replay/${namespace}/${destination}/${m.seq}/${m.timestampNanos}`, expect: { streamName: EVENTS_STREAM } });
    // Only now is the copy stored. Counted by whoever deleted the dead letter: two replays at
    // once each count only their own.
    if (await deleteDeadLetter(jsm, m.seq)) {
      replayed++;
      options.onProgress?.(replayed);
    }
  };
  // Several moves at once: one after another, each waited for two round trips, and a review's
  // 124k dead letters took minutes with nothing said. Delivery never kept their order anyway.
  const moving = new Set<Promise<void>>();
  let failure: { err: unknown } | undefined;
  const began = performance.now();
  let started = 0;
  try {
    for await (const { m } of selectDeadLetters(js, options, lastSeq)) {
      if (options.perSecond !== undefined) {
        const early = began + (started * 1000) / options.perSecond - performance.now();
        if (early > 0) await new Promise((r) => setTimeout(r, early));
      }
      started++;
      if (!failure && options.signal?.aborted) failure = { err: options.signal.reason };
      if (failure) break;
      const p: Promise<void> = move(m).then(
        () => void moving.delete(p),
        (err: unknown) => {
          moving.delete(p);
          failure ??= { err };
        },
      );
      moving.add(p);
      if (moving.size >= REPLAY_IN_FLIGHT) await Promise.race(moving);
    }
  } catch (err) {
    failure ??= { err };
  }
  // Those already moving finish either way, so that what is reported moved was moved.
  await Promise.all(moving);
  if (failure) throw new ReplayInterruptedError(replayed, failure.err);
  return { replayed };
}

/** Dead letters being moved at once by a replay. */
export const REPLAY_IN_FLIGHT = 64;

/**
 * Removes the dead letters of the given users from the given sources (in one namespace, every
 * destination): a deletion request's erasure must not be undone by a later `trackhook replay`,
 * which would send the user's messages to the receivers again. Delete notifications themselves
 * stay, so that a failed one can still be replayed. Resolves with how many were removed.
 */
export async function purgeDeadLettersOf(
  js: JetStreamClient,
  jsm: JetStreamManager,
  /** `sources`: only dead letters of these sources; all the namespace's when undefined. */
  request: { namespace: string; sources?: readonly string[]; userIds: readonly string[] },
): Promise<{ removed: number }> {
  checkName("namespace", request.namespace);
  const lastSeq = await streamLastSeq(jsm, DLQ_STREAM);
  if (lastSeq === undefined) return { removed: 0 };
  const users = new Set(request.userIds);
  const sources = request.sources ? new Set(request.sources) : undefined;
  let removed = 0;
  for await (const m of readStored(js, DLQ_STREAM, `trackhook.dlq.${request.namespace}.*`, { lastSeq, whole: true })) {
    const source = sourceOfEventSubject(m.headers?.get(DEAD_LETTER_HEADERS.originalSubject) ?? "");
    if (sources && (source === undefined || !sources.has(source))) continue;
    let body: { userId?: unknown; type?: unknown };
    try {
      body = parseJson(m.string()) as { userId?: unknown; type?: unknown };
    } catch {
      continue;
    }
    if (body?.type === "delete" || typeof body?.userId !== "string" || !users.has(body.userId)) continue;
    if (await deleteDeadLetter(jsm, m.seq)) removed++;
  }
  return { removed };
}

/** Deletes a dead letter; false when it was gone already (a concurrent replay or purge took it). */
async function deleteDeadLetter(jsm: JetStreamManager, seq: number): Promise<boolean> {
  return jsm.streams.deleteMessage(DLQ_STREAM, seq, false).catch((err: Error) => {
    if (!/no message found|not found/i.test(err.message)) throw err;
    return false;
  });
}

/**
 * The dead letters `selection` names, oldest first, none stored after `lastSeq`, each with its body
 * parsed when it is JSON. Without a message id, `limit` bounds the read itself.
 */
async function* selectDeadLetters(js: JetStreamClient, selection: DeadLetterSelection, lastSeq: number): AsyncGenerator<{ m: JsMsg; body: { messageId?: unknown; type?: unknown } }> {
  const { messageId, limit } = selection;
  const startTime = selection.sinceMs !== undefined ? new Date(Date.now() - selection.sinceMs) : undefined;
  const read = readStored(js, DLQ_STREAM, dlqSubject(selection.namespace, selection.destination), {
    ...(startTime ? { startTime } : {}), ...(limit !== undefined && messageId === undefined ? { limit } : {}), lastSeq,
  });
  let selected = 0;
  for await (const m of read) {
    // A body that is not a JSON object (the worker dead-letters those as invalid_message) is still
    // listed and replayed, only never matched by a message id.
    let body: { messageId?: unknown; type?: unknown } = {};
    try {
      // As stored: numbers a double cannot hold are shown as sent, not rounded.
      const parsed: unknown = parseJson(m.string());
      if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) body = parsed;
    } catch {
      // not JSON
    }
    if (messageId !== undefined && body.messageId !== messageId) continue;
    yield { m, body };
    if (limit !== undefined && ++selected >= limit) return;
  }
}

/**
 * The destination's durable consumer on TRACKHOOK_EVENTS, or undefined when delivery does not know
 * the destination (no consumer, or no stream yet). A removed destination's records remain, so the
 * admin commands use this to tell "nothing yet" from "no such destination".
 */
export async function destinationConsumer(nc: NatsConnection, ref: DestinationRef): Promise<ConsumerInfo | undefined> {
  return consumerOf(await jetstreamManager(nc), ref);
}

/** destinationConsumer, with a JetStreamManager the caller holds (each new one asks JetStream's API first). */
export async function consumerOf(jsm: JetStreamManager, ref: DestinationRef): Promise<ConsumerInfo | undefined> {
  checkDestinationRef(ref);
  return jsm.consumers.info(EVENTS_STREAM, consumerName(ref.namespace, ref.destination)).catch((err: Error) => {
    if (isConsumerNotFound(err) || isStreamNotFound(err)) return undefined;
    throw err;
  });
}

/** A dead letter as `trackhook dead-letters` shows it: why it was given up, and what it was. */
export interface DeadLetter {
  /** Sequence in TRACKHOOK_DLQ. */
  seq: number;
  /** When it was dead-lettered. */
  at: string;
  reason: string;
  /** Delivery rounds tried before giving up. */
  attempts: number;
  /** The last URL's answer: an HTTP status or an error code (`timeout`, `tls_verification_failed`, ...). */
  lastStatus?: number;
  lastError?: string;
  messageId?: string;
  type?: string;
  /** `<namespace>/<source>` it came from, read off the subject it was first stored on. */
  source?: string;
}

/** A destination's dead letters, oldest first, without moving them (`replay` moves them). */
export async function* readDeadLetters(nc: NatsConnection, options: DeadLetterSelection): AsyncGenerator<DeadLetter> {
  checkDestinationRef(options);
  if (options.limit !== undefined && options.limit <= 0) return;
  const lastSeq = await streamLastSeq(await jetstreamManager(nc), DLQ_STREAM);
  if (lastSeq === undefined) return;
  for await (const { m, body } of selectDeadLetters(jetstream(nc), options, lastSeq)) yield deadLetterOf(m, body);
}

/** What a message of TRACKHOOK_DLQ says of itself: its headers, and the ids of the body (read once by the caller). */
export function deadLetterOf(m: JsMsg, body: { messageId?: unknown; type?: unknown }): DeadLetter {
  const header = (name: string) => m.headers?.get(name) || undefined;
  const lastStatus = Number(header(DEAD_LETTER_HEADERS.lastStatus));
  const lastError = header(DEAD_LETTER_HEADERS.lastError);
  const [, namespace, source] = /^trackhook\.events\.([^.]+)\.([^.]+)\./.exec(header(DEAD_LETTER_HEADERS.originalSubject) ?? "") ?? [];
  return {
    seq: m.seq,
    at: new Date(m.info.timestampNanos / 1e6).toISOString(),
    reason: header(DEAD_LETTER_HEADERS.reason) ?? "unknown",
    attempts: Number(header(DEAD_LETTER_HEADERS.attempts) ?? 0),
    ...(Number.isInteger(lastStatus) && lastStatus > 0 ? { lastStatus } : {}),
    ...(lastError ? { lastError } : {}),
    ...(typeof body.messageId === "string" ? { messageId: body.messageId } : {}),
    ...(typeof body.type === "string" ? { type: body.type } : {}),
    ...(namespace && source ? { source: `${namespace}/${source}` } : {}),
  };
}
