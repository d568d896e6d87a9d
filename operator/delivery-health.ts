// A WebhookDestination's Delivering condition: whether what it is sent gets somewhere. Ready says
// its spec is in effect; Delivering says how delivery goes, read from JetStream by the leading
// operator every interval, for the team that owns the destination and reads kubectl rather than
// Prometheus (a receiver down for an hour showed Ready=True throughout).
//
// Written only when it changes (a status write is an event for every watcher): its messages name
// no counts that move while the state holds. The write itself goes through the destination's
// reconcile (requeued here), so it never races the Ready the reconcile writes.
import type { ConsumerInfo, JetStreamManager } from "@nats-io/jetstream";
import { oldestWaitingAt } from "../dataplane/delivery/mod.ts";
import type { Logger } from "../dataplane/logging.ts";
import { DLQ_STREAM, DLQ_SUBJECTS, EVENTS_STREAM, consumerName, dlqSubject, isStreamNotFound } from "../dataplane/nats/mod.ts";
import { KeyedLogInterval, LogInterval } from "../dataplane/telemetry/mod.ts";
import { formatDuration, type Condition } from "../schema/mod.ts";
import { conditionOf, conditionTime, withDelivering, type ReadyState } from "./conditions.ts";
import type { EventRecorder } from "./events.ts";
import type { ObjectCache } from "./kube/reflector.ts";
import { isDeleting, type DestinationResource } from "./reconcile/context.ts";

export const DELIVERING = "Delivering";

export interface DeliveryHealthOptions {
  /**
   * Messages waiting this long with none delivered or dead-lettered meanwhile: NoProgress; a
   * dead letter stored within it: DeadLettering. 0 turns the condition off (and removes it).
   */
  windowMs: number;
}

/** How often JetStream is read: a tenth of the window, within 200 ms and 30 s. */
export function checkIntervalMs(windowMs: number): number {
  return Math.min(30_000, Math.max(200, Math.round(windowMs / 10)));
}

/**
 * DeadLettering holds until this many windows pass without a dead letter: a receiver refusing one
 * message every few minutes flipped it back and forth, two Events each time (found by a review).
 */
const DEAD_LETTERING_HOLD_WINDOWS = 3;
/** Destinations looked at side by side in one check. */
const CHECK_CONCURRENCY = 8;

interface Deps {
  jsm: JetStreamManager;
  destinations: ObjectCache<DestinationResource>;
  events: EventRecorder;
  log: Logger;
  /** Reconcile the destination, which writes the condition found here (conditions()). */
  requeue(namespace: string, name: string): void;
}

/** Dead letters by destination subject, and TRACKHOOK_DLQ's last sequence. */
interface DeadLetterCounts {
  bySubject: Record<string, number>;
  lastSeq: number;
}

/** null: no Delivering condition (disabled, or no consumer to read); else the state, and the generation it was found for. */
type Found = (ReadyState & { generation: number | undefined }) | null;

export class DeliveryHealth {
  readonly #deps: Deps;
  readonly #windowMs: number;
  /** By uid: what the last check found. */
  readonly #found = new Map<string, Found>();
  /**
   * By uid: when this operator last knew a message to be acked (delivered or dead-lettered), and
   * the ack floor then. nats-server keeps ack_floor.last_active in memory only: after its restart
   * the field is gone until the next ack, and "never" would read as no progress (found by a review).
   */
  readonly #acked = new Map<string, { at: number; floor: number }>();
  /** By dead-letter subject: its count and the stream's last sequence at the last read, and when its newest dead letter was stored. */
  readonly #deadLetters = new Map<string, { count: number; lastAt: number | undefined; streamLastSeq: number }>();
  /** Events per destination and reason, at most one every 10 minutes. */
  readonly #eventsSaid = new KeyedLogInterval(10 * 60_000);
  readonly #failedSaid = new LogInterval(10 * 60_000);
  #timer: NodeJS.Timeout | undefined;
  #checking: Promise<void> | undefined;

  constructor(deps: Deps, options: DeliveryHealthOptions) {
    this.#deps = deps;
    this.#windowMs = options.windowMs;
  }

  /** The conditions with Delivering as the last check found it; as they are for a destination not checked yet. */
  conditions(object: { kind: string; metadata: { uid: string } }, conditions: Condition[]): Condition[] {
    if (object.kind !== "WebhookDestination") return conditions;
    // Turned off: none, not the one an earlier run left behind.
    if (this.#windowMs <= 0) return withDelivering(conditions, undefined, undefined);
    if (!this.#found.has(object.metadata.uid)) return conditions;
    const found = this.#found.get(object.metadata.uid);
    return withDelivering(conditions, found ?? undefined, found?.generation);
  }

  start(): void {
    if (this.#windowMs <= 0) return;
    this.#timer = setInterval(() => {
      this.#checking ??= this.check().finally(() => (this.#checking = undefined));
    }, checkIntervalMs(this.#windowMs));
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#checking;
  }

  /** One look at every destination. NATS not answering leaves every condition as it was. */
  async check(): Promise<void> {
    const { jsm, destinations } = this.#deps;
    const consumers = new Map<string, ConsumerInfo>();
    let deadLetters: DeadLetterCounts;
    try {
      // No events stream (lost with NATS's store, not made again yet): no consumers, so no condition.
      for await (const info of jsm.consumers.list(EVENTS_STREAM)) consumers.set(info.name, info);
    } catch (err) {
      if (!isStreamNotFound(err)) return this.#notChecked(err);
    }
    try {
      deadLetters = await jsm.streams.info(DLQ_STREAM, { subjects_filter: DLQ_SUBJECTS }).then(
        (info) => ({ bySubject: (info.state.subjects ?? {}) as Record<string, number>, lastSeq: info.state.last_seq }),
        (err: unknown) => {
          if (isStreamNotFound(err)) return { bySubject: {}, lastSeq: 0 };
          throw err;
        },
      );
    } catch (err) {
      return this.#notChecked(err);
    }
    const now = Date.now();
    const live = destinations.list().filter((d) => !isDeleting(d));
    const queue = [...live];
    await Promise.all(Array.from({ length: CHECK_CONCURRENCY }, async () => {
      for (let d = queue.shift(); d; d = queue.shift()) await this.#checkOne(d, consumers, deadLetters, now);
    }));
    const uids = new Set(live.map((d) => d.metadata.uid));
    for (const uid of this.#found.keys()) if (!uids.has(uid)) this.#found.delete(uid);
    for (const uid of this.#acked.keys()) if (!uids.has(uid)) this.#acked.delete(uid);
    const subjects = new Set(live.map((d) => dlqSubject(d.metadata.namespace!, d.metadata.name)));
    for (const subject of this.#deadLetters.keys()) if (!subjects.has(subject)) this.#deadLetters.delete(subject);
  }

  #notChecked(err: unknown): void {
    const line = { err: (err as Error).message };
    if (this.#failedSaid.pass() !== undefined) this.#deps.log.warn(line, "the Delivering conditions were not checked: JetStream did not answer; they stay as they were");
  }

  async #checkOne(destination: DestinationResource, consumers: Map<string, ConsumerInfo>, deadLetters: DeadLetterCounts, now: number): Promise<void> {
    const { uid, namespace, name, generation } = destination.metadata as { uid: string; namespace: string; name: string; generation?: number };
    const shown = conditionOf(destination.status?.conditions, DELIVERING);
    // What was found last: before the first check since this operator started (a restart, a new
    // leader), what the status says.
    const before: ReadyState | null = this.#found.has(uid) ? (this.#found.get(uid) ?? null) : (shown ?? null);
    // Disabled, or no consumer (not made yet, or lost with NATS's store: Ready says which): no condition.
    const info = destination.spec.enabled === false ? undefined : consumers.get(consumerName(namespace, name));
    let found: Found = null;
    if (info) {
      try {
        found = { ...(await this.#assess(uid, namespace, name, info, deadLetters, before, now)), generation };
      } catch (err) {
        this.#deps.log.debug({ destination: `${namespace}/${name}`, err: (err as Error).message }, "delivery health not checked");
        return;
      }
    }
    await this.#record(destination, shown, before, found);
  }

  async #assess(uid: string, namespace: string, name: string, info: ConsumerInfo, deadLetters: DeadLetterCounts, before: ReadyState | null, now: number): Promise<ReadyState> {
    const label = `${namespace}/${name}`;
    const window = formatDuration(this.#windowMs);
    const lastAck = this.#lastAck(uid, info, now);
    if (info.num_pending + info.num_ack_pending > 0 && now - lastAck >= this.#windowMs) {
      const oldest = (await oldestWaitingAt(this.#deps.jsm, info))?.getTime();
      if (oldest !== undefined && now - oldest >= this.#windowMs) {
        return {
          status: "False",
          reason: "NoProgress",
          message: `messages wait, and none has been delivered or dead-lettered since ${conditionTime(new Date(Math.max(lastAck, oldest)))}: its URLs fail, do not answer or are paused (Retry-After, too many failures), or no delivery pod runs; \`trackhook attempts --destination ${label}\` shows what they answered`,
        };
      }
    }
    const lastDeadLetterAt = await this.#lastDeadLetterAt(dlqSubject(namespace, name), deadLetters);
    // Once DeadLettering, it holds for longer than it takes to set it; across a restart or a new
    // leader too, from what the status shows (found by a review).
    const holdMs = before?.reason === "DeadLettering" ? DEAD_LETTERING_HOLD_WINDOWS * this.#windowMs : this.#windowMs;
    if (lastDeadLetterAt !== undefined && now - lastDeadLetterAt < holdMs) {
      return {
        status: "False",
        reason: "DeadLettering",
        message: `messages are being dead-lettered (this clears once none has been for ${formatDuration(DEAD_LETTERING_HOLD_WINDOWS * this.#windowMs)}): \`trackhook dead-letters --destination ${label}\` says why; \`trackhook replay --destination ${label}\` sends them again`,
      };
    }
    return { status: "True", reason: "Delivering", message: `no message waited ${window} without one being delivered, and none was dead-lettered within it` };
  }

  /**
   * When a message of the consumer was last acked, as far as anyone can tell: ack_floor.last_active
   * (any ack moves it, the floor or not; a nak does not), else what this operator saw last (the
   * floor moved: then), else now (nothing known yet: the window starts).
   */
  #lastAck(uid: string, info: ConsumerInfo, now: number): number {
    // nats.js types it as nanoseconds; the server sends an RFC 3339 time.
    const lastActive = info.ack_floor.last_active as unknown;
    const reported = typeof lastActive === "string" ? Date.parse(lastActive) : Number.NaN;
    const floor = info.ack_floor.stream_seq;
    const known = this.#acked.get(uid);
    const at = !Number.isNaN(reported) ? Math.max(reported, known?.at ?? reported) : known && known.floor === floor ? known.at : now;
    this.#acked.set(uid, { at, floor });
    return at;
  }

  /**
   * When the newest of a destination's dead letters was stored; read again only when their count
   * or the stream's last sequence moved (a replay that fails again removes and adds as many: the
   * count alone stayed, and the new ones went unseen, found by a review).
   */
  async #lastDeadLetterAt(subject: string, counts: DeadLetterCounts): Promise<number | undefined> {
    const count = counts.bySubject[subject] ?? 0;
    const known = this.#deadLetters.get(subject);
    if (count === 0) {
      // None left (replayed, removed, or the dead-letter stream lost): when the last one was
      // stored still holds DeadLettering for its while. Forgetting it turned a destination still
      // dead-lettering Delivering five seconds after the stream was lost (found by a
      // disaster-recovery review).
      if (known?.lastAt === undefined) this.#deadLetters.delete(subject);
      else this.#deadLetters.set(subject, { count, lastAt: known.lastAt, streamLastSeq: counts.lastSeq });
      return known?.lastAt;
    }
    if (known && known.count === count && known.streamLastSeq === counts.lastSeq) return known.lastAt;
    const last = await this.#deps.jsm.streams.getMessage(DLQ_STREAM, { last_by_subj: subject });
    const lastAt = last?.time.getTime();
    this.#deadLetters.set(subject, { count, lastAt, streamLastSeq: counts.lastSeq });
    return lastAt;
  }

  /**
   * Keeps what was found; a change from what the status shows is written (through a reconcile), and
   * one from what was found before is said in an Event and logged.
   */
  async #record(destination: DestinationResource, shown: ReadyState | undefined, before: ReadyState | null, found: Found): Promise<void> {
    const { uid, namespace, name } = destination.metadata as { uid: string; namespace: string; name: string };
    this.#found.set(uid, found);
    if (shown?.status !== found?.status || shown?.reason !== found?.reason || shown?.message !== found?.message) this.#deps.requeue(namespace, name);
    if (!found || (before?.status === found.status && before?.reason === found.reason)) return;
    // A destination's first look finding it well is no news.
    if (found.status === "True" && before?.status !== "False") return;
    const line = { destination: `${namespace}/${name}`, delivering: found.status, reason: found.reason, detail: found.message, was: before ? `${before.status} ${before.reason}` : undefined };
    if (found.status === "False") this.#deps.log.warn(line, "destination not delivering");
    else this.#deps.log.info(line, "destination delivering again");
    if (this.#eventsSaid.pass(`${uid}/${found.reason}`) === undefined) return;
    await this.#deps.events.record(destination, found.status === "False" ? "Warning" : "Normal", found.reason, found.message).catch(() => {});
  }
}
