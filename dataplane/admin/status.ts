// `trackhook status`: how delivery goes, per destination, read from JetStream alone: what waits and
// since when, what was dead-lettered, and the last attempt's answer. For whoever runs `dev` on a
// laptop or `deliver` without Kubernetes, where no Delivering condition says it, and for a
// cluster's operators wanting the figures behind that condition without Prometheus.
import { jetstreamManager, type ConsumerInfo, type JetStreamManager, type StreamInfo } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { oldestWaitingAt, type AttemptRecord } from "../delivery/mod.ts";
import { ATTEMPTS_STREAM, DLQ_STREAM, DLQ_SUBJECTS, EVENTS_STREAM, attemptsSubject, dlqSubject, isStreamNotFound, parseConsumerName, parseDlqSubject } from "../nats/mod.ts";
import { attemptRecordsIn } from "./attempts.ts";
import { consumerOf } from "./dead-letters.ts";
import { checkName } from "./names.ts";

/** Which destinations: all of them, a namespace's, or one. */
export type StatusSelection = { namespace?: undefined } | { namespace: string; destination?: string };

/** A stream's fill: when max bytes are reached, ingest answers 503 (the events stream discards new messages). */
export interface StreamStatus {
  name: string;
  messages: number;
  bytes: number;
  /** Absent: no limit. */
  maxBytes?: number;
  /** Absent: kept until the byte limit. */
  maxAgeMs?: number;
  /** When the oldest message kept was stored. */
  firstAt?: string;
}

export interface DestinationStatus {
  /** namespace/name */
  destination: string;
  /**
   * Whether its durable consumer exists. Without one nothing is delivered to it: deleted or
   * disabled, not started by any `deliver` (or `dev`) yet, or a name that is not one. With one,
   * something made it: a `deliver` with `--config` keeps it for a minute after the destination left.
   */
  consumer: boolean;
  /** Messages its consumer has not been given yet. */
  waiting?: number;
  /** Messages given to delivery and not yet done: being sent, or waiting for their next try (or for a paused URL). */
  inProgress?: number;
  /**
   * Whether a delivery process is asking its consumer for messages (a pull request is open). False
   * when none runs with this destination in its config, and also, briefly, while one is busy with
   * as many messages as it may take.
   */
  deliveryPulling?: boolean;
  /** When the oldest message not yet done (waiting or in progress) was stored. */
  oldestUndeliveredAt?: string;
  /** When a message was last done (delivered or dead-lettered), when JetStream knows (not across its restart). */
  lastDoneAt?: string;
  deadLetters: number;
  lastDeadLetterAt?: string;
  /**
   * The last attempt of each URL among the records stored last (a delivery turn's), in the order
   * tried: every URL of a message's first round, only the failing ones of a retry.
   */
  lastAttempts?: UrlAttempt[];
}

/** An attempt record without the destination, which its row names. */
export type UrlAttempt = Omit<AttemptRecord, "destination">;

export interface DeliveryStatus {
  /** Absent: nothing was ever stored (no ingest has used this NATS). */
  events?: StreamStatus;
  deadLetterQueue?: StreamStatus;
  destinations: DestinationStatus[];
}

/** Destinations read side by side. */
const CONCURRENCY = 8;
/** How long after a consumer seemed to have no delivery pulling it is looked at again. */
const SECOND_LOOK_MS = 1_000;

/** The status of the destinations selected, ordered by namespace and name. */
export async function readStatus(nc: NatsConnection, selection: StatusSelection = {}): Promise<DeliveryStatus> {
  if (selection.namespace !== undefined) {
    checkName("namespace", selection.namespace);
    if (selection.destination !== undefined) checkName("destination", selection.destination);
  }
  const jsm = await jetstreamManager(nc);
  const dlqFilter = selection.namespace === undefined ? DLQ_SUBJECTS
    : selection.destination === undefined ? `trackhook.dlq.${selection.namespace}.>` : dlqSubject(selection.namespace, selection.destination);
  const [events, dlq] = await Promise.all([streamInfo(jsm, EVENTS_STREAM), streamInfo(jsm, DLQ_STREAM, dlqFilter)]);
  const deadLetters = new Map<string, number>();
  for (const [subject, count] of Object.entries(dlq?.state.subjects ?? {})) {
    const ref = parseDlqSubject(subject);
    if (ref) deadLetters.set(`${ref.namespace}/${ref.destination}`, count);
  }

  const consumers = new Map<string, ConsumerInfo>();
  if (events) {
    if (selection.namespace !== undefined && selection.destination !== undefined) {
      const info = await consumerOf(jsm, { namespace: selection.namespace, destination: selection.destination });
      if (info) consumers.set(`${selection.namespace}/${selection.destination}`, info);
    } else {
      for await (const info of jsm.consumers.list(EVENTS_STREAM)) {
        const ref = parseConsumerName(info.name);
        if (ref && (selection.namespace === undefined || ref.namespace === selection.namespace)) consumers.set(`${ref.namespace}/${ref.destination}`, info);
      }
    }
  }

  const names = new Set([...consumers.keys(), ...deadLetters.keys()]);
  // Asked for by name, it is shown whatever is known of it: "no consumer, no dead letters" answers too.
  if (selection.namespace !== undefined && selection.destination !== undefined) names.add(`${selection.namespace}/${selection.destination}`);
  const sorted = [...names].sort();
  const destinations: DestinationStatus[] = [];
  for (let i = 0; i < sorted.length; i += CONCURRENCY) {
    destinations.push(...(await Promise.all(sorted.slice(i, i + CONCURRENCY).map((key) => destinationStatus(jsm, key, consumers.get(key), deadLetters.get(key) ?? 0)))));
  }
  return {
    ...(events ? { events: streamStatus(events) } : {}),
    ...(dlq ? { deadLetterQueue: streamStatus(dlq) } : {}),
    destinations,
  };
}

async function destinationStatus(jsm: JetStreamManager, key: string, listed: ConsumerInfo | undefined, deadLetters: number): Promise<DestinationStatus> {
  const [namespace, destination] = key.split("/") as [string, string];
  let info = listed;
  // Messages waiting, none in progress and no pull open: no delivery runs for it, or one was
  // between two pulls (they expire every few seconds). A second look tells them apart.
  if (info && info.num_waiting === 0 && info.num_pending > 0 && info.num_ack_pending === 0) {
    await new Promise((resolve) => setTimeout(resolve, SECOND_LOOK_MS));
    info = (await consumerOf(jsm, { namespace, destination })) ?? info;
  }
  const [oldest, lastDeadLetter, lastRecords] = await Promise.all([
    info && info.num_pending + info.num_ack_pending > 0 ? oldestWaitingAt(jsm, info) : undefined,
    deadLetters > 0 ? lastMessage(jsm, DLQ_STREAM, dlqSubject(namespace, destination)) : undefined,
    lastMessage(jsm, ATTEMPTS_STREAM, attemptsSubject(namespace, destination)),
  ]);
  const lastAttempts = lastRecords ? lastAttemptPerUrl(attemptRecordsIn(lastRecords.string())) : [];
  // nats.js types it as nanoseconds; the server sends an RFC 3339 time, absent until an ack.
  const lastActive = info?.ack_floor.last_active as unknown;
  const lastDoneAt = typeof lastActive === "string" && !Number.isNaN(Date.parse(lastActive)) ? new Date(lastActive).toISOString() : undefined;
  return {
    destination: key,
    consumer: info !== undefined,
    ...(info ? { waiting: info.num_pending, inProgress: info.num_ack_pending, deliveryPulling: info.num_waiting > 0 } : {}),
    ...(oldest ? { oldestUndeliveredAt: oldest.toISOString() } : {}),
    ...(lastDoneAt ? { lastDoneAt } : {}),
    deadLetters,
    ...(lastDeadLetter ? { lastDeadLetterAt: lastDeadLetter.time.toISOString() } : {}),
    ...(lastAttempts.length > 0 ? { lastAttempts } : {}),
  };
}

/**
 * Of one stored message of attempt records, the last of each URL. The last record alone would
 * show whichever URL happened to be written last: a backup URL's 500 behind the main one's 200,
 * or the reverse (found by a review).
 */
function lastAttemptPerUrl(records: AttemptRecord[]): UrlAttempt[] {
  const byUrl = new Map<string, UrlAttempt>();
  for (const { destination: _destination, ...record } of records) {
    byUrl.delete(record.url); // in the order last tried
    byUrl.set(record.url, record);
  }
  return [...byUrl.values()];
}

function streamStatus(info: StreamInfo): StreamStatus {
  const { state, config } = info;
  return {
    name: config.name,
    messages: state.messages,
    bytes: state.bytes,
    ...(config.max_bytes > 0 ? { maxBytes: config.max_bytes } : {}),
    ...(config.max_age > 0 ? { maxAgeMs: config.max_age / 1e6 } : {}),
    ...(state.messages > 0 ? { firstAt: new Date(state.first_ts).toISOString() } : {}),
  };
}

async function streamInfo(jsm: JetStreamManager, stream: string, subjectsFilter?: string): Promise<StreamInfo | undefined> {
  try {
    return await jsm.streams.info(stream, subjectsFilter ? { subjects_filter: subjectsFilter } : undefined);
  } catch (err) {
    if (isStreamNotFound(err)) return undefined;
    throw err;
  }
}

/** The last message on `subject`; undefined when there is none (or no stream yet). */
async function lastMessage(jsm: JetStreamManager, stream: string, subject: string) {
  try {
    return (await jsm.streams.getMessage(stream, { last_by_subj: subject })) ?? undefined;
  } catch (err) {
    if (isStreamNotFound(err)) return undefined;
    throw err;
  }
}

