// Creates or updates the streams the data plane needs, with the settings of DESIGN.md.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager, type StreamConfig } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { ATTEMPTS_STREAM, ATTEMPTS_SUBJECTS, DLQ_STREAM, DLQ_SUBJECTS, EVENTS_STREAM, EVENTS_SUBJECTS, REPLAY_SUBJECTS } from "./subjects.ts";

export interface EventsStreamSettings {
  /** How long messages are kept; must exceed the longest retry window (default 72h). */
  maxAgeMs: number;
  /** Disk budget; when full, publishes are refused (discard new) and ingest answers 503. */
  maxBytes: number;
  /** Nats-Msg-Id deduplication window. Costs server memory: see docs/operations.md. */
  duplicateWindowMs: number;
  replicas: number;
  /**
   * Settings that are defaults rather than asked for (no flag): an existing stream keeps its own
   * for these. A process started without --stream-replicas (a dev run against production NATS,
   * an old manifest) would otherwise take a replicas-3 stream down to one copy, or a tuned
   * max_age back to 72h.
   */
  defaulted?: ReadonlyArray<"maxAgeMs" | "maxBytes" | "duplicateWindowMs" | "replicas">;
}

const STREAM_FIELDS = {
  maxAgeMs: ["max_age"], maxBytes: ["max_bytes"], duplicateWindowMs: ["duplicate_window"], replicas: ["num_replicas"],
  maxPerDestination: ["max_msgs_per_subject", "discard_new_per_subject"],
} as const satisfies Record<string, ReadonlyArray<keyof StreamConfig>>;

/** The stream settings ensureStream leaves as they are on an existing stream. */
export function keptSettings(defaulted: ReadonlyArray<keyof typeof STREAM_FIELDS> = []): Array<keyof StreamConfig> {
  return defaulted.flatMap((setting) => STREAM_FIELDS[setting]);
}

export function eventsStreamConfig(settings: EventsStreamSettings): Partial<StreamConfig> & { name: string } {
  return {
    name: EVENTS_STREAM,
    subjects: [EVENTS_SUBJECTS, REPLAY_SUBJECTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.New,
    max_age: nanos(settings.maxAgeMs),
    max_bytes: settings.maxBytes,
    duplicate_window: nanos(settings.duplicateWindowMs),
    num_replicas: settings.replicas,
    max_msg_size: 1024 * 1024,
  };
}

/**
 * Dead letters: messages whose retries ran out or that failed for good, kept 14 days for
 * `trackhook replay`. When full it refuses (discard new): delivery then keeps the message and
 * retries later rather than dropping it.
 */
/** Size and replicas of the DLQ and attempts streams (`deliver` owns them). */
export interface SideStreamSettings {
  maxBytes: number;
  replicas: number;
  /**
   * The DLQ only: dead letters kept per destination (0: no limit beyond maxBytes). The stream is
   * shared, and one tenant's receiver refusing everything could otherwise fill it for all.
   */
  maxPerDestination?: number;
  /** As EventsStreamSettings.defaulted. */
  defaulted?: ReadonlyArray<"maxBytes" | "replicas" | "maxPerDestination">;
}
export const DEFAULT_SIDE_STREAM: SideStreamSettings = { maxBytes: 1024 ** 3, replicas: 1, maxPerDestination: 0 };

export function dlqStreamConfig({ maxBytes, replicas, maxPerDestination = 0 }: SideStreamSettings = DEFAULT_SIDE_STREAM): Partial<StreamConfig> & { name: string } {
  return {
    num_replicas: replicas,
    name: DLQ_STREAM,
    subjects: [DLQ_SUBJECTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.New,
    max_age: nanos(14 * 24 * 3_600_000),
    max_bytes: maxBytes,
    duplicate_window: nanos(2 * 60_000),
    // One subject per destination: at its limit, only that destination's dead letters are
    // refused (discard new per subject), not everybody's. nats-server leaves the flag out when
    // false: undefined, not false, or every start would see a change (and nats.js's update
    // merges into the stream's config, so the key must be there to turn the flag off).
    max_msgs_per_subject: maxPerDestination > 0 ? maxPerDestination : -1,
    discard_new_per_subject: maxPerDestination > 0 ? true : (undefined as unknown as boolean),
  };
}

/** One record per delivery attempt per URL, for `trackhook attempts`; old records make room (discard old). */
export function attemptsStreamConfig({ maxBytes, replicas }: SideStreamSettings = DEFAULT_SIDE_STREAM): Partial<StreamConfig> & { name: string } {
  return {
    num_replicas: replicas,
    name: ATTEMPTS_STREAM,
    subjects: [ATTEMPTS_SUBJECTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(7 * 24 * 3_600_000),
    max_bytes: maxBytes,
  };
}

/** A setting of an existing stream that ensureStream changes: its name, and the values before and after. */
export interface StreamSettingChange {
  setting: string;
  from: unknown;
  to: unknown;
}

/**
 * Creates the stream, or updates the existing one to `config`. `onChange` hears what an update
 * changes before it is made: every process that runs this sets the stream's settings (the last
 * to start wins), and a shorter max_age drops older messages at once, so a change must be told.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  wanted: Partial<StreamConfig> & { name: string },
  onChange?: (changes: StreamSettingChange[]) => void,
  /** Settings an existing stream keeps (defaults, not asked for); a new stream gets `wanted`'s. */
  keep: ReadonlyArray<keyof StreamConfig> = [],
): Promise<void> {
  let config = wanted;
  try {
    const existing = await jsm.streams.info(wanted.name).catch((err: unknown) => {
      if (isStreamNotFound(err)) return undefined;
      throw err;
    });
    if (existing) {
      // A mirror takes no messages of its own, and updating one with subjects fails with
      // JetStream's "stream mirrors can not contain subjects" (found by a DR review: a stack trace
      // at every start, on a NATS being moved to by mirroring).
      if (existing.config.mirror) {
        throw new StreamIsMirrorError(
          `${wanted.name} on this NATS is a mirror of ${existing.config.mirror.name}: trackhook stores into it, which a mirror cannot take. ` +
            "To move to this NATS, make it an ordinary stream (a backup restored, or deleted once what it holds is delivered elsewhere: docs/operations.md, \"Moving to another NATS\")",
        );
      }
      config = keeping(wanted, existing.config, keep);
      const changes = (Object.keys(config) as Array<keyof StreamConfig>)
        .filter((key) => JSON.stringify(existing.config[key]) !== JSON.stringify(config[key]))
        .map((key) => ({ setting: key, from: existing.config[key], to: config[key] }));
      if (changes.length === 0) return;
      onChange?.(changes);
      await jsm.streams.update(config.name, config);
      return;
    }
    try {
      await jsm.streams.add(config);
    } catch (addErr) {
      // Another process (an ingest worker, a second pod) created it first: update it instead,
      // keeping its settings as for any existing stream.
      if (!isStreamNameInUse(addErr)) throw addErr;
      config = keeping(wanted, (await jsm.streams.info(wanted.name)).config, keep);
      await jsm.streams.update(config.name, config);
    }
  } catch (err) {
    throw storageRefused(err, config.name, config.max_bytes ?? 0);
  }
}

/** `wanted`, with the existing stream's own value for each setting in `keep`. */
function keeping(wanted: Partial<StreamConfig> & { name: string }, existing: StreamConfig, keep: ReadonlyArray<keyof StreamConfig>) {
  return withinMaxAge({ ...wanted, ...Object.fromEntries(keep.map((key) => [key, existing[key]])) });
}

/**
 * JetStream refuses a duplicate window longer than max_age. Flags are clamped against each other,
 * but a kept setting (the stream's own max_age or window) can meet a flag given now.
 */
function withinMaxAge<C extends Partial<StreamConfig>>(config: C): C {
  const { max_age: maxAge, duplicate_window: window } = config;
  return maxAge && window && window > maxAge ? { ...config, duplicate_window: maxAge } : config;
}

/** Whether the stream holds a message on any subject matching `filter` (a KV delete marker counts). */
export async function hasMessagesOn(jsm: JetStreamManager, stream: string, filter: string): Promise<boolean> {
  const info = await jsm.streams.info(stream, { subjects_filter: filter });
  return Object.keys(info.state.subjects ?? {}).length > 0;
}

/** A JetStream error saying the stream does not exist (yet). */
export function isStreamNotFound(err: unknown): boolean {
  return err instanceof Error && (err.name === "StreamNotFoundError" || /stream not found/i.test(err.message));
}

/** JetStream's answer to making a stream that another process has just made. */
export function isStreamNameInUse(err: unknown): boolean {
  return err instanceof Error && /already in use/i.test(err.message);
}

/** A JetStream error saying the consumer does not exist. */
export function isConsumerNotFound(err: unknown): boolean {
  return err instanceof Error && (err.name === "ConsumerNotFoundError" || /consumer not found/i.test(err.message));
}

/** A stream of trackhook's exists as a mirror of another, which takes no messages of its own. */
export class StreamIsMirrorError extends Error {
  readonly code = "TRACKHOOK_STREAM_IS_MIRROR";
}

/** nats-server cannot set aside a stream's max_bytes: its JetStream storage (max_file_store) is short. */
export class StreamStorageRefusedError extends Error {
  readonly code = "TRACKHOOK_STREAM_STORAGE_REFUSED";
}

/**
 * JetStream sets aside each stream's max_bytes out of the server's max_file_store, and refuses a
 * stream that does not fit with "insufficient storage resources": said as what to change, rather
 * than as a stack trace on every restart of a crash-looping pod.
 */
function storageRefused(err: unknown, stream: string, maxBytes: number): unknown {
  if (!(err instanceof Error) || !/insufficient storage/i.test(err.message)) return err;
  return new StreamStorageRefusedError(
    `nats-server refused ${stream} with max_bytes ${maxBytes} (${(maxBytes / 1024 ** 3).toFixed(2)} GiB): it sets aside every stream's max_bytes out of its JetStream storage (max_file_store), and there is not that much left. ` +
      "Give NATS more (its max_file_store, or the volume) or the stream less (--stream-max-bytes); see docs/operations.md, \"Sizing NATS storage\"",
    { cause: err },
  );
}
