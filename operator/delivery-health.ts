// A WebhookDestination's Delivering condition: whether what it is sent gets somewhere. Ready says
// its spec is in effect; Delivering says how delivery goes, read from JetStream by the leading
// operator every interval, for the team that owns the destination and reads kubectl rather than
// Prometheus (a receiver down for an hour showed Ready=True throughout).
//
// Written only when it changes (a status write is an event for every watcher): its messages name
// no counts or times that move while the state holds. The write itself goes through the
// destination's reconcile (requeued here), so it never races the Ready the reconcile writes.
import type { ConsumerInfo, JetStreamManager } from "@nats-io/jetstream";
import { oldestWaitingAt } from "../dataplane/delivery/mod.ts";
import type { Logger } from "../dataplane/logging.ts";
import { DLQ_STREAM, DLQ_SUBJECTS, EVENTS_STREAM, consumerName, dlqSubject, isStreamNotFound } from "../dataplane/nats/mod.ts";
import { formatDuration, type Condition } from "../schema/mod.ts";
import { conditionOf, withDelivering, type ReadyState } from "./conditions.ts";
import type { EventRecorder } from "./events.ts";
import type { ObjectCache } from "./kube/reflector.ts";
import { isDeleting, type DestinationResource } from "./reconcile/context.ts";

export const DELIVERING = "Delivering";

export interface DeliveryHealthOptions {
  /**
   * Messages waiting this long with none delivered or dead-lettered meanwhile: NoProgress; a
   * dead letter stored within it: DeadLettering. 0 turns the condition off.
   */
  windowMs: number;
}

/** How often JetStream is read: a tenth of the window, within 200 ms and 30 s. */
export function checkIntervalMs(windowMs: number): number {
  return Math.min(30_000, Math.max(200, Math.round(windowMs / 10)));
}

interface Deps {
  jsm: JetStreamManager;
  destinations: ObjectCache<DestinationResource>;
  events: EventRecorder;
  log: Logger;
  /** Reconcile the destination, which writes the condition found here (conditions()). */
  requeue(namespace: string, name: string): void;
}

/** null: no Delivering condition (a disabled destination). */
type Found = ReadyState | null;

export class DeliveryHealth {
  readonly #deps: Deps;
  readonly #windowMs: number;
  /** By uid: what the last check found. */
  readonly #found = new Map<string, Found>();
  /** By dead-letter subject: its count at the last check, and when its newest dead letter was stored. */
  readonly #deadLetters = new Map<string, { count: number; lastAt: number | undefined }>();
  #timer: NodeJS.Timeout | undefined;
  #checking: Promise<void> | undefined;

  constructor(deps: Deps, options: DeliveryHealthOptions) {
    this.#deps = deps;
    this.#windowMs = options.windowMs;
  }

  /** The conditions with Delivering as the last check found it; as they are for a destination not checked yet. */
  conditions(object: { kind: string; metadata: { uid: string; generation?: number } }, conditions: Condition[]): Condition[] {
    if (object.kind !== "WebhookDestination" || !this.#found.has(object.metadata.uid)) return conditions;
    return withDelivering(conditions, this.#found.get(object.metadata.uid) ?? undefined, object.metadata.generation);
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
    let deadLetters: Record<string, number> | undefined;
    try {
      for await (const info of jsm.consumers.list(EVENTS_STREAM)) consumers.set(info.name, info);
      deadLetters = await jsm.streams.info(DLQ_STREAM, { subjects_filter: DLQ_SUBJECTS }).then(
        (info) => (info.state.subjects ?? {}) as Record<string, number>,
        (err: unknown) => {
          if (isStreamNotFound(err)) return {};
          throw err;
        },
      );
    } catch (err) {
      this.#deps.log.debug({ err: (err as Error).message }, "delivery health not checked: JetStream did not answer");
      return;
    }
    const now = Date.now();
    const seen = new Set<string>();
    for (const destination of destinations.list()) {
      if (isDeleting(destination)) continue;
      const { uid, namespace, name } = destination.metadata as { uid: string; namespace: string; name: string };
      seen.add(uid);
      let found: Found | undefined;
      if (destination.spec.enabled === false) found = null;
      else {
        // No consumer: not made yet, or lost with NATS's store; Ready says so. As it was meanwhile.
        const info = consumers.get(consumerName(namespace, name));
        if (!info) continue;
        found = await this.#assess(`${namespace}/${name}`, info, deadLetters, now).catch((err: unknown) => {
          this.#deps.log.debug({ destination: `${namespace}/${name}`, err: (err as Error).message }, "delivery health not checked");
          return undefined;
        });
        if (found === undefined) continue;
      }
      await this.#record(destination, found);
    }
    for (const uid of this.#found.keys()) if (!seen.has(uid)) this.#found.delete(uid);
  }

  async #assess(label: string, info: ConsumerInfo, deadLetters: Record<string, number>, now: number): Promise<ReadyState> {
    const window = formatDuration(this.#windowMs);
    if (info.num_pending + info.num_ack_pending > 0) {
      // Any ack moves ack_floor.last_active, the floor itself or not: a message delivered, or
      // dead-lettered (acked once its dead letter is stored). A nak does not.
      // nats.js types it as nanoseconds; the server sends an RFC 3339 time.
      const lastActive = info.ack_floor.last_active as unknown;
      const lastAck = typeof lastActive === "string" ? Date.parse(lastActive) : Number.NaN;
      if (!(now - lastAck < this.#windowMs)) {
        const oldest = (await oldestWaitingAt(this.#deps.jsm, info))?.getTime();
        if (oldest !== undefined && now - oldest >= this.#windowMs) {
          const since = Number.isNaN(lastAck) ? oldest : Math.max(lastAck, oldest);
          return {
            status: "False",
            reason: "NoProgress",
            message: `messages wait, and none has been delivered or dead-lettered since ${new Date(since).toISOString().replace(/\.\d+Z$/, "Z")}: its URLs fail or do not answer, or no delivery pod runs; \`trackhook attempts --destination ${label}\` shows what they answered`,
          };
        }
      }
    }
    const lastDeadLetterAt = await this.#lastDeadLetterAt(dlqSubject(...(label.split("/") as [string, string])), deadLetters);
    if (lastDeadLetterAt !== undefined && now - lastDeadLetterAt < this.#windowMs) {
      return {
        status: "False",
        reason: "DeadLettering",
        message: `messages were dead-lettered within the last ${window}: \`trackhook dead-letters --destination ${label}\` says why, and \`trackhook replay --destination ${label}\` sends them again once the receiver takes them`,
      };
    }
    return { status: "True", reason: "Delivering", message: `no message waited ${window} without one being delivered, and none was dead-lettered within it` };
  }

  /** When the newest of a destination's dead letters was stored; read again only when their count moved. */
  async #lastDeadLetterAt(subject: string, counts: Record<string, number>): Promise<number | undefined> {
    const count = counts[subject] ?? 0;
    const known = this.#deadLetters.get(subject);
    if (count === 0) {
      this.#deadLetters.delete(subject);
      return undefined;
    }
    if (known && known.count === count) return known.lastAt;
    const last = await this.#deps.jsm.streams.getMessage(DLQ_STREAM, { last_by_subj: subject });
    const lastAt = last?.time.getTime();
    this.#deadLetters.set(subject, { count, lastAt });
    return lastAt;
  }

  /** Keeps what was found; a change is written (through a reconcile), said in an Event and logged. */
  async #record(destination: DestinationResource, found: Found): Promise<void> {
    const { uid, namespace, name } = destination.metadata as { uid: string; namespace: string; name: string };
    const shown = conditionOf(destination.status?.conditions, DELIVERING);
    // Before the first check since this operator started, the status says what was found last.
    const before = this.#found.has(uid) ? this.#found.get(uid) : shown ? (shown as ReadyState) : null;
    this.#found.set(uid, found);
    if (shown?.status !== found?.status || shown?.reason !== found?.reason || shown?.message !== found?.message) this.#deps.requeue(namespace, name);
    if (!found || (before?.status === found.status && before?.reason === found.reason)) return;
    // A destination's first look finding it well is no news.
    if (found.status === "True" && before?.status !== "False") return;
    const line = { destination: `${namespace}/${name}`, delivering: found.status, reason: found.reason, detail: found.message, was: before ? `${before.status} ${before.reason}` : undefined };
    if (found.status === "False") this.#deps.log.warn(line, "destination not delivering");
    else this.#deps.log.info(line, "destination delivering again");
    await this.#deps.events.record(destination, found.status === "False" ? "Warning" : "Normal", found.reason, found.message).catch(() => {});
  }
}
