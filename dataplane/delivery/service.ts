// Runs delivery for every enabled destination of the config in force, and follows config changes
// live: a destination added starts, one changed restarts with its new settings, one disabled or
// removed stops and loses its consumer (nothing is delivered for it afterwards).
import { jetstream, jetstreamManager, type ConsumerInfo, type JetStreamManager, type StreamInfo } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { CompiledConfig, CompiledDestination } from "../../schema/mod.ts";
import type { ConfigProvider } from "../config/mod.ts";
import type { Logger } from "../logging.ts";
import { ATTEMPTS_STREAM, attemptsSubject, DLQ_STREAM, DLQ_SUBJECTS, EVENTS_STREAM, TurnBatch, attemptsStreamConfig, consumerName, dlqStreamConfig, dlqSubject, ensureStream, hasMessagesOn, isNatsConnected, isStreamNotFound, isSlowJetStream, keptSettings, patiently, StreamGuard, streamReadiness, type Readiness, type SideStreamSettings, type StreamSettingChange } from "../nats/mod.ts";
import { ensureDestinationConsumer, oldestWaitingAt, removeDestinationConsumers, type ConsumerToMake, type ResumePoint } from "./consumers.ts";
import { isFirstDelivery, markMade, markOwed, owesWholeStream } from "./first-delivery.ts";
import { deadLetterUndelivered } from "./undelivered.ts";
import type { DeliveryBacklog, DeliveryBacklogs, DeliveryMetrics } from "./metrics.ts";
import { KeyedLogInterval, type StreamUse } from "../telemetry/mod.ts";
import { DestinationWorker, changeOf, pullAhead, type DeliveryActivity, type WebhookSending } from "./worker.ts";
import type { ConsumerPosition } from "./consumer-watch.ts";
import { DeliverySlots } from "./limit.ts";

/** Every setting of a side stream: all kept when none is given (see start()). */
const ALL_SIDE_SETTINGS: NonNullable<SideStreamSettings["defaulted"]> = ["maxBytes", "replicas", "maxPerDestination"];

/** How long a scrape waits for JetStream's figures; what comes later is left out of that reading. */
const BACKLOG_READ_BUDGET_MS = 3_000;
/** How long a destination's last figures stand in for ones JetStream does not give (NATS away). */
const BACKLOG_HOLD_MS = 10 * 60_000;

/** Default process-wide bound on messages in delivery, across all destinations. */
export const DEFAULT_PROCESS_MAX_IN_FLIGHT = 1000;

export interface DeliveryServiceDeps {
  /** Hears URL pauses begin and end (dev's activity lines). */
  activity?: DeliveryActivity;
  nc: NatsConnection;
  config: ConfigProvider;
  sender: WebhookSending;
  log: Logger;
  metrics: DeliveryMetrics;
  /** Messages in delivery at once in this process, all destinations together (default 1000). */
  maxInFlight?: number;
  /** Size and replicas of the dead-letter and attempt-record streams. */
  dlqStream?: SideStreamSettings;
  attemptsStream?: SideStreamSettings;
  /**
   * How long the consumer of a destination no longer enabled is kept, with what it still had to
   * deliver, in case the destination comes back (0: removed at once). Default CONSUMER_REMOVAL_GRACE_MS.
   */
  consumerRemovalGraceMs?: number;
  /** How often the events stream's max_age is read again (tests shorten it). */
  streamCheckMs?: number;
  /** Between tries at removing such a consumer while NATS does not answer (tests shorten it). Default CONSUMER_REMOVAL_RETRY_MS. */
  consumerRemovalRetryMs?: number;
  /** How often each destination's consumer is checked for, to recreate one deleted under delivery. */
  consumerCheckMs?: number;
  /** When a message whose dead letter was refused comes back (tests shorten it). */
  deadLetterRetryMs?: number;
  /** The first wait before a destination that could not start is tried again. Default START_RETRY_MS. */
  startRetryMs?: number;
  /**
   * The config comes from `--config` files: a destination's createdAt is its file's time (or an
   * exported creationTimestamp), which does not change when the file is moved out and back.
   */
  configFromFiles?: boolean;
  /**
   * Given the service before its destinations start: its stop() then ends the start. A SIGTERM
   * while a few hundred consumers were being made drained the NATS connection under the workers
   * already running: exit 1, and their messages in flight sent again after ack_wait (found by a
   * review).
   */
  starting?: (service: DeliveryService) => void;
}

/** A destination that could not start is tried again after this, doubling up to the maximum. */
const START_RETRY_MS = 1_000;
const STREAM_CHECK_MS = 30_000;
/**
 * How far before it was last seen a consumer lost on a restored stream resumes: what was stored
 * just before the loss, and this host's clock where an older nats-server gives no time of its own.
 */
const ROLLED_BACK_MARGIN_MS = 60_000;
const UNDELIVERED_MOVED = "a destination no longer enabled had delete notifications (user erasures) or replayed dead letters not yet delivered: moved to the dead-letter queue (`trackhook dead-letters`; `trackhook replay` once it is enabled again)";
const MADE_AGAIN =
  "the destination's consumer was missing though it was delivered to before (its files dropped it for over a minute, here or on another delivery machine, or a `nats consumer rm`): made from now; what was stored while it had none is not sent to it";
const FIRST_DELIVERY =
  "first delivery on this NATS: these destinations read the events stream from its first message (what the ingest accepted before delivery ran is theirs); destinations added later start when they are read";
const ALREADY_REMOVED = "consumers of destinations no longer enabled were already removed (by another delivery process, or by an earlier try of this one that did not hear back)";
const KEPT_FOR_OTHERS =
  "destinations no longer enabled here are still delivered by another delivery process on this NATS (its config still has them): their consumers are kept, and removed by the last process whose config drops them";
const SOURCE_REMOVED_MOVED = "sources left a destination's spec.sources with delete notifications (user erasures) not yet delivered: moved to the dead-letter queue, reason source_removed (`trackhook dead-letters`; `trackhook replay` to send them); the sources' other messages not yet delivered are not sent";
const START_RETRY_MAX_MS = 30_000;
const SOURCE_REMOVED_NOT_MOVED = "sources left a destination's spec.sources, but their undelivered delete notifications (user erasures) could not be moved to the dead-letter queue: those sources are still read and delivered until it takes them (make room: `trackhook dead-letters`, `trackhook replay`, or raise its limits); tried again every minute";
/** How often a destination whose leaving sources' notices could not be moved tries again. */
const NARROW_RETRY_MS = 60_000;

/**
 * A config file caught half-written (`gen > config.yaml`), or a destination disabled for a
 * moment, must not throw away the messages its consumer still had to deliver.
 */
export const CONSUMER_REMOVAL_GRACE_MS = 60_000;
/** Between tries at removing such a consumer while NATS does not answer. */
export const CONSUMER_REMOVAL_RETRY_MS = 30_000;

export class DeliveryService {
  readonly #deps: DeliveryServiceDeps;
  readonly #jsm: JetStreamManager;
  readonly #workers = new Map<string, DestinationWorker>();
  /** The last figures read per destination (see #withHeld). */
  readonly #lastBacklog = new Map<string, { backlog: DeliveryBacklog; at: number }>();
  /** The last reading of each side stream's use, held as the backlogs are (#withHeld). */
  readonly #lastStreamUse = new Map<"deadLetterStream" | "attemptsStream", { use: StreamUse; at: number }>();
  readonly #slots: DeliverySlots;
  readonly #turn: TurnBatch;
  /** Config changes are applied one after another, never interleaved. */
  #applying: Promise<void> = Promise.resolve();
  /**
   * The stopped workers of destinations restarted (a change of URL, timeout...), until their
   * successors run: where their consumers had got to, read once they have finished, recreates a
   * consumer deleted under delivery just before the change from there, not from the
   * destination's start policy.
   */
  readonly #predecessors = new Map<string, DestinationWorker>();
  /** Workers of destinations removed or restarted, finishing their in-flight requests, by destination. */
  readonly #draining = new Map<string, Promise<void>>();
  #unsubscribe: () => void = () => {};
  /** The events stream's max_age: a retry window as long as it would let messages age out unretried. */
  #streamMaxAgeMs = Infinity;
  /** Consumers this service created or updated: the only ones it may delete. */
  readonly #managed = new Set<string>();
  /** Consumers of destinations no longer enabled, to be removed when their grace ends. */
  readonly #removals = new Map<string, NodeJS.Timeout>();
  /** The consumers the config in effect wants, with their destinations (namespace/name). */
  #wanted = new Map<string, string>();
  /**
   * Destinations (namespace/name) the config in effect wants delivered, and since when for those
   * not started yet: a consumer made late starts there, not at "now", so what was stored while
   * its start kept failing (NATS away for a moment) is delivered too.
   */
  readonly #pending = new Map<string, number>();
  #retryTimer: NodeJS.Timeout | undefined;
  /** Destinations still reading sources that left them (their notices could not be moved yet), and the retry. */
  readonly #narrowing = new Set<string>();
  #narrowRetry: NodeJS.Timeout | undefined;
  readonly #notMovedLog = new KeyedLogInterval(10 * 60_000);
  readonly #firstRetryMs: number;
  #retryMs: number;
  /** Destinations wanted per tenant (namespace), for what a worker started now pulls ahead (pullAhead()). */
  #wantedPerTenant = new Map<string, number>();
  #stopped = false;
  #readinessJsm: JetStreamManager | undefined;
  /** Makes the dead-letter and attempt streams again if they go missing. */
  #guard: StreamGuard | undefined;
  #maxAgeTimer: NodeJS.Timeout | undefined;
  /** When this process's worker of a consumer (by name) last finished: what the consumer did after, another process did. */
  readonly #drainedAt = new Map<string, number>();
  /** Destinations this process marked owed the events stream (#firstDelivery), until it makes their consumers. */
  readonly #owedHere = new Set<string>();
  /** `made` marks being written (#markMade). */
  readonly #marking = new Set<Promise<void>>();

  private constructor(deps: DeliveryServiceDeps, jsm: JetStreamManager) {
    this.#deps = deps;
    this.#firstRetryMs = deps.startRetryMs ?? START_RETRY_MS;
    this.#retryMs = this.#firstRetryMs;
    this.#jsm = jsm;
    this.#slots = new DeliverySlots(deps.maxInFlight ?? DEFAULT_PROCESS_MAX_IN_FLIGHT);
    this.#turn = new TurnBatch((err) => deps.log.warn({ err: (err as Error).message }, "an ack or nak could not be sent; the message will be redelivered"));
  }

  static async start(deps: DeliveryServiceDeps): Promise<DeliveryService> {
    const jsm = await patiently("reaching JetStream", () => jetstreamManager(deps.nc), deps.log);
    // No settings given (`trackhook dev`, which has no flags for these): an existing stream keeps
    // all of its own, as for a flag left out; `dev --nats` pointed at a shared NATS took a
    // replicas-3 dead-letter stream down to one copy and 1 GiB.
    // max_age and the duplicate window have no flags: an existing stream always keeps its own (found
    // by a DR review: a DLQ kept 30 days for an incident was cut back to 14 at the next restart,
    // and a shorter max_age drops older dead letters at once, their only copy).
    const kept = (settings: SideStreamSettings | undefined) => [...keptSettings(settings ? settings.defaulted : ALL_SIDE_SETTINGS), "max_age", "duplicate_window"] as const;
    const sideStreams = [
      { config: dlqStreamConfig(deps.dlqStream), keep: kept(deps.dlqStream) },
      { config: attemptsStreamConfig(deps.attemptsStream), keep: kept(deps.attemptsStream) },
    ];
    for (const { config, keep } of sideStreams) {
      const said = (changes: StreamSettingChange[]) => deps.log.warn({ stream: config.name, changes }, "changing the stream's settings to this process's flags");
      await patiently(`making stream ${config.name}`, () => ensureStream(jsm, config, said, keep), deps.log);
    }
    const events = await waitForEventsStream(jsm, deps.log);
    const service = new DeliveryService(deps, jsm);
    service.#guard = new StreamGuard(deps.nc, jsm, sideStreams.map((s) => s.config), deps.log, { recreated: deps.metrics.streamsRecreated });
    if (events.config.max_age > 0) service.#streamMaxAgeMs = events.config.max_age / 1e6;
    service.#maxAgeTimer = setInterval(() => void service.#readStreamMaxAge(), deps.streamCheckMs ?? STREAM_CHECK_MS).unref();
    deps.metrics.readBacklogFrom(() => service.backlog());
    deps.metrics.readDestinationsFrom(() => {
      const now = Date.now();
      return [...service.#wanted.values()].map((key) => {
        const worker = service.#workers.get(key);
        return {
          destination: key, running: worker !== undefined, pausedUrls: worker?.pausedUrls(now) ?? [],
          ...(worker ? { retryWindowSeconds: worker.retryWindowMs / 1000 } : {}),
        };
      });
    });
    deps.starting?.(service);
    // In line with applies, so that stop() waits for it.
    if (deps.configFromFiles) await (service.#applying = service.#firstDelivery());
    if (service.#stopped) return service;
    // Heard from before the first apply (changes are applied in turn after it): a file added while
    // a few hundred consumers were being made was never delivered (found by a review).
    service.#unsubscribe = deps.config.subscribe((config) => {
      void service.apply(config).catch((err: unknown) => deps.log.error({ err }, "applying the new delivery config failed"));
    });
    // A destination that cannot start is logged and left out; the others run.
    await service.apply(deps.config.current()).catch(() => {});
    return service;
  }

  /** Destinations being delivered now, as namespace/name. */
  get destinations(): string[] {
    return [...this.#workers.keys()];
  }

  /**
   * Lag, in-flight and dead-letter counts per destination, and the dead-letter stream's use, from
   * JetStream. Nothing while NATS is disconnected (a scrape must not wait for timeouts), and a
   * destination whose consumer cannot be read (deleted under delivery) is left out alone.
   */
  async backlog(): Promise<DeliveryBacklogs> {
    const read = isNatsConnected(this.#deps.nc) ? await this.#readBacklog() : { destinations: [] };
    return this.#withHeld(read);
  }

  /**
   * What JetStream did not tell this time (NATS away, or not within the budget) is the last reading,
   * up to BACKLOG_HOLD_MS old, its oldest message older by the time since: nothing is delivered,
   * acked or dead-lettered without NATS. Left out, the gauges vanished at each NATS blip, and the
   * delivery alerts on them resolved (and started their `for` again) while nothing had changed.
   */
  #withHeld(read: DeliveryBacklogs): DeliveryBacklogs {
    const now = Date.now();
    const told = new Set(read.destinations.map((b) => b.destination));
    for (const b of read.destinations) this.#lastBacklog.set(b.destination, { backlog: b, at: now });
    const destinations = [...read.destinations];
    for (const key of this.#workers.keys()) {
      const last = this.#lastBacklog.get(key);
      if (told.has(key) || !last || now - last.at > BACKLOG_HOLD_MS) continue;
      const { oldestAgeSeconds } = last.backlog;
      destinations.push({ ...last.backlog, oldestAgeSeconds: oldestAgeSeconds ? oldestAgeSeconds + (now - last.at) / 1000 : oldestAgeSeconds });
    }
    for (const key of this.#lastBacklog.keys()) if (!this.#workers.has(key)) this.#lastBacklog.delete(key);
    const held: Pick<DeliveryBacklogs, "deadLetterStream" | "attemptsStream"> = {};
    for (const stream of ["deadLetterStream", "attemptsStream"] as const) {
      const use = read[stream];
      if (use) this.#lastStreamUse.set(stream, { use, at: now });
      const last = this.#lastStreamUse.get(stream);
      if (use) held[stream] = use;
      else if (last && now - last.at <= BACKLOG_HOLD_MS) held[stream] = last.use;
    }
    return { destinations, ...held };
  }

  async #readBacklog(): Promise<DeliveryBacklogs> {
    // What has not answered within the budget is left out of this reading: a NATS node that hangs
    // (the client notices within ~9 s) made every read wait out its 5 s timeout, one after
    // another, and the chart's 10 s scrape timeout then lost every metric of the pod.
    let timer: NodeJS.Timeout | undefined;
    const budget = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), BACKLOG_READ_BUDGET_MS)));
    const inBudget = <T>(read: Promise<T>): Promise<T | undefined> => Promise.race([read.catch(() => undefined), budget]);
    try {
      // A missing dead-letter stream (made again by the guard) must not blank every lag gauge.
      const dlqRead = inBudget(this.#jsm.streams.info(DLQ_STREAM, { subjects_filter: DLQ_SUBJECTS }));
      const attemptsRead = inBudget(this.#jsm.streams.info(ATTEMPTS_STREAM));
      const perSubject = dlqRead.then((dlq) => (dlq?.state.subjects ?? {}) as Record<string, number>);
      const read = await Promise.all(
        [...this.#workers.values()].map(async ({ destination: d }): Promise<DeliveryBacklog[]> => {
          const info = await inBudget(this.#jsm.consumers.info(EVENTS_STREAM, consumerName(d.namespace, d.name)));
          if (!info) return [];
          const waiting = info.num_pending + info.num_ack_pending > 0;
          const oldestAgeSeconds = waiting ? await inBudget(this.#oldestAgeSeconds(info)) : 0;
          const deadLetters = (await perSubject)[dlqSubject(d.namespace, d.name)] ?? 0;
          return [{ destination: `${d.namespace}/${d.name}`, pending: info.num_pending, inFlight: info.num_ack_pending, deadLetters, oldestAgeSeconds }];
        }),
      );
      const [dlq, attempts] = [await dlqRead, await attemptsRead];
      const use = (info: StreamInfo) => ({ bytes: info.state.bytes, maxBytes: info.config.max_bytes });
      return { destinations: read.flat(), ...(dlq ? { deadLetterStream: use(dlq) } : {}), ...(attempts ? { attemptsStream: use(attempts) } : {}) };
    } finally {
      clearTimeout(timer);
    }
  }

  async #oldestAgeSeconds(info: ConsumerInfo): Promise<number | undefined> {
    const oldest = await oldestWaitingAt(this.#jsm, info);
    return oldest === undefined ? undefined : Math.max(0, (Date.now() - oldest.getTime()) / 1000);
  }

  /** Ready while JetStream answers. */
  async ready(): Promise<Readiness> {
    if (!isNatsConnected(this.#deps.nc)) return { ready: false, reason: "NATS disconnected; reconnecting" };
    // Its own short timeout: the chart's readiness probe gives up after 3 s.
    this.#readinessJsm ??= await jetstreamManager(this.#deps.nc, { timeout: 1000, checkAPI: false });
    return streamReadiness(this.#readinessJsm, EVENTS_STREAM);
  }

  apply(config: CompiledConfig): Promise<void> {
    // A failed apply must not poison the chain: the next config is applied from a clean start.
    const applying = this.#applying.catch(() => {}).then(() => this.#apply(config));
    this.#applying = applying;
    return applying;
  }

  async #apply(config: CompiledConfig): Promise<void> {
    const { log } = this.#deps;
    const wanted = new Map(config.destinations.filter((d) => d.enabled).map((d) => [`${d.namespace}/${d.name}`, d]));
    const stopping = new Map<string, Promise<void>>();
    for (const [key, worker] of this.#workers) {
      const next = wanted.get(key);
      const change = next ? changeOf(next, worker.destination) : "restart";
      if (change === "none") continue;
      if (next && change === "live") {
        worker.applyLive(next);
        log.info({ destination: key }, "destination's shared secret or headers changed; in force for the next requests");
        continue;
      }
      if (next) this.#predecessors.set(key, worker);
      // Its in-flight requests may take up to its timeout (30 s for some): no config change waits
      // for them (a review saw one tenant's URL change hold another's new destination back 21 s).
      // Only its successor, if any, waits, below.
      stopping.set(key, this.#drain(key, worker));
      this.#workers.delete(key);
    }
    const keep = new Map<string, string>();
    const failed: string[] = [];
    this.#wantedPerTenant = new Map();
    for (const d of wanted.values()) this.#wantedPerTenant.set(d.namespace, (this.#wantedPerTenant.get(d.namespace) ?? 0) + 1);
    for (const key of this.#pending.keys()) if (!wanted.has(key)) this.#pending.delete(key);
    for (const key of this.#predecessors.keys()) if (!wanted.has(key)) this.#predecessors.delete(key);
    for (const key of this.#owedHere) if (!wanted.has(key)) this.#owedHere.delete(key);
    for (const [key, destination] of wanted) {
      keep.set(consumerName(destination.namespace, destination.name), key);
      if (this.#stopped) continue; // stopping: the rest are not started (kept, for the next start)
      if (this.#workers.has(key)) {
        // Sources that left it are read until their notices can be moved (see #ensureConsumer).
        if (this.#narrowing.has(key)) await this.#ensureConsumer(key, destination).catch(() => {});
        continue;
      }
      const since = this.#pending.get(key) ?? Date.now();
      this.#pending.set(key, since);
      const predecessor = this.#draining.get(key);
      if (predecessor) {
        // Started by the change applied once its predecessor has finished (one worker per
        // destination at a time), without holding up this change or any other meanwhile.
        void predecessor.then(() => {
          if (!this.#stopped) void this.apply(this.#deps.config.current()).catch(() => {});
        });
        continue;
      }
      try {
        const last = this.#predecessors.get(key)?.lastPosition;
        // resumeAt counts only if the consumer has to be made (it was deleted): an existing one keeps
        // its place. Without createdAt (config files), one made now starts when it was first wanted.
        const start = last ? { resumeAt: await this.#resumeFrom(last) } : this.#madeFromConfig(key, since);
        this.#managed.add(await this.#ensureConsumer(key, destination, start));
        // Made, by this process or another: its marks have done their work.
        this.#owedHere.delete(key);
        await this.#startWorker(key, destination);
        this.#pending.delete(key);
        this.#predecessors.delete(key);
      } catch (err) {
        // One destination that cannot start must not keep the others from running.
        failed.push(key);
        log.error(
          { err: (err as Error).message, destination: key, retryInSeconds: this.#retryMs / 1000 },
          "destination could not start; tried again shortly (what is stored for it meanwhile is kept for it)",
        );
      }
    }
    if (failed.length > 0) this.#retryLater();
    else this.#retryMs = this.#firstRetryMs;
    // Only consumers this process managed: another deliver (or dev) on the same NATS with another
    // config keeps its own. A destination removed while no process ran keeps its consumer until
    // the operator, or someone with `nats consumer rm`, cleans it up.
    this.#wanted = keep;
    this.#deps.metrics.destinationsInConfig(wanted.keys());
    for (const name of keep.keys()) {
      clearTimeout(this.#removals.get(name));
      this.#removals.delete(name);
    }
    const removed = [...this.#managed].filter((name) => !keep.has(name) && !this.#removals.has(name));
    const graceMs = this.#deps.consumerRemovalGraceMs ?? CONSUMER_REMOVAL_GRACE_MS;
    if (graceMs === 0) {
      await Promise.all(stopping.values());
      await this.#removeConsumers(removed);
    } else if (removed.length > 0) {
      for (const name of removed) this.#scheduleRemoval(name, graceMs);
      log.info({ consumers: removed, removedInSeconds: Math.round(graceMs / 1000) }, "destinations no longer enabled: nothing more is sent to them; their consumers, with the messages still to deliver, are kept in case they come back (in a cluster the operator removes them at once), then removed, their undelivered delete notifications moved to the dead-letter queue");
    }
    if (failed.length > 0) throw new Error(`destinations not started: ${failed.join(", ")}`);
  }

  /**
   * Stops a worker in the background; the promise never rejects, and stop() waits for it. A
   * destination has no new worker while its old one drains (see #apply).
   */
  #drain(key: string, worker: DestinationWorker): Promise<void> {
    const drained: Promise<void> = worker
      .stop()
      .catch((err: unknown) => void this.#deps.log.warn({ err: (err as Error).message, destination: key }, "a stopped destination's in-flight deliveries did not finish cleanly"))
      .finally(() => {
        this.#drainedAt.set(consumerName(worker.destination.namespace, worker.destination.name), Date.now());
        if (this.#draining.get(key) === drained) this.#draining.delete(key);
      });
    this.#draining.set(key, drained);
    return drained;
  }

  /**
   * Removes a consumer of a destination no longer enabled in `afterMs`, unless the destination is
   * back by then; tried again every consumerRemovalRetryMs while NATS does not answer (a soak test saw
   * one kept for good, with its pending growing, when NATS was away at the one-minute mark).
   */
  #scheduleRemoval(name: string, afterMs: number): void {
    const timer = setTimeout(() => {
      this.#removals.delete(name);
      // In line with config changes: one that brought the destination back has the last word.
      this.#applying = this.#applying
        .catch(() => {})
        .then(() => (this.#wanted.has(name) ? undefined : this.#removeConsumers([name])))
        .catch((err: unknown) => {
          // NATS away or slow: again soon. Anything else (a permission refused) would fail the same way.
          const retryMs = this.#deps.consumerRemovalRetryMs ?? CONSUMER_REMOVAL_RETRY_MS;
          const again = isSlowJetStream(err) && !this.#stopped && !this.#wanted.has(name) && !this.#removals.has(name);
          this.#deps.log.warn(
            { err: (err as Error).message, consumer: name, ...(again ? { retryInSeconds: retryMs / 1000 } : {}) },
            again ? "the consumer of a destination no longer enabled could not be removed; trying again" : "the consumer of a destination no longer enabled could not be removed; tried again at the next config change",
          );
          if (again) this.#scheduleRemoval(name, retryMs);
        });
    }, afterMs);
    timer.unref();
    this.#removals.set(name, timer);
  }

  /**
   * The first delivery on this NATS with the config from files (first-delivery.ts): the enabled
   * destinations in the files are marked owed the events stream, then every one's consumer is
   * made, before any worker runs. No attempt record is written meanwhile, which would push the
   * marks out of the attempts stream (it drops its oldest when full: a review's 300 destinations
   * on a small one lost 286 backlogs), so a process stopped or killed halfway finds them again.
   */
  async #firstDelivery(): Promise<void> {
    const { log, config } = this.#deps;
    const inFiles = config.current().destinations.filter((d) => d.enabled);
    if (inFiles.length === 0 || !(await patiently("reading what was delivered before", () => isFirstDelivery(this.#jsm, inFiles), log))) return;
    await patiently("writing the first delivery's marks", () => markOwed(jetstream(this.#deps.nc), inFiles), log);
    for (const d of inFiles) this.#owedHere.add(`${d.namespace}/${d.name}`);
    log.info({ destinations: inFiles.map((d) => `${d.namespace}/${d.name}`) }, FIRST_DELIVERY);
    const since = Date.now();
    let read: CompiledConfig | undefined;
    let enabledNow = new Map<string, CompiledDestination>();
    for (const { namespace, name } of inFiles) {
      if (this.#stopped) return;
      const key = `${namespace}/${name}`;
      // As the files are now: one dropped meanwhile is not made (its consumer was nobody's to
      // remove, found by a review), one changed is made as it is.
      if (config.current() !== read) {
        read = config.current();
        enabledNow = new Map(read.destinations.filter((d) => d.enabled).map((d) => [`${d.namespace}/${d.name}`, d]));
      }
      const destination = enabledNow.get(key);
      if (!destination) {
        this.#owedHere.delete(key);
        continue;
      }
      // One that fails here is tried again, and said, when the config is applied.
      const made = await this.#ensureConsumer(key, destination, this.#madeFromConfig(key, since)).catch(() => undefined);
      if (made) {
        this.#managed.add(made);
        this.#owedHere.delete(key);
      }
    }
  }

  /**
   * How a consumer missing at a destination's start is made, from the config alone (no position
   * of a predecessor to resume from): see #asMadeNow. What is said of it is said by the process
   * that made it (not one that lost the race, nor at each retry).
   */
  #madeFromConfig(key: string, since: number): Pick<Parameters<typeof ensureDestinationConsumer>[2] & object, "firstWanted" | "madeAs" | "onCreated"> {
    let made: MadeNow | undefined;
    return {
      firstWanted: new Date(since).toISOString(),
      madeAs: async (d: CompiledDestination) => (made = await this.#asMadeNow(d)),
      onCreated: () => {
        if (made?.deliveredBefore) this.#deps.log.warn({ destination: key }, MADE_AGAIN);
        if (made?.wholeStream) this.#markMade(made.destination);
      },
    };
  }

  /**
   * How a --config destination's consumer made now starts:
   * - from when this process first wanted it, ignoring its file's time, when it has attempt
   *   records: it was delivered to before, was taken out of the config (its consumer removed a
   *   minute later), and is back with the same file time (found by a review: a file moved out and
   *   back in sent 300 delivered messages again). Like a destination enabled again. The operator's
   *   config says this itself (status.inEffectSince);
   * - from the events stream's first message for the destinations in the files at the first
   *   delivery on this NATS (first-delivery.ts): what ingest accepted before delivery first ran is
   *   theirs, whenever their files were written (found by a VM install review: skipped);
   * - else as the destination says (createdAt, a recent file's time).
   * Asked only when the consumer is missing: one request per destination at each start would be a
   * thousand for a thousand destinations.
   */
  async #asMadeNow(destination: CompiledDestination): Promise<MadeNow> {
    if (!this.#deps.configFromFiles) return { destination };
    const delivered = await hasMessagesOn(this.#jsm, ATTEMPTS_STREAM, attemptsSubject(destination.namespace, destination.name)).catch((err: unknown) => {
      if (isStreamNotFound(err)) return false;
      throw err;
    });
    if (delivered) return { destination: { ...destination, createdAt: undefined }, deliveredBefore: true };
    // The marks this process wrote count even if the attempts stream has dropped them since.
    if (await owesWholeStream(this.#jsm, destination, this.#owedHere.has(`${destination.namespace}/${destination.name}`))) {
      return { destination: { ...destination, createdAt: undefined }, wholeStream: true };
    }
    return { destination };
  }

  /**
   * Marks the first delivery's consumer made, so that it is made from the stream's start only
   * once. Not awaited: missing, the destination disabled past the grace and enabled again later
   * would get the whole stream again (said here), which is better than holding its start up.
   */
  #markMade(destination: CompiledDestination): void {
    const marking = markMade(jetstream(this.#deps.nc), destination).catch((err: unknown) => {
      this.#deps.log.warn({ err: (err as Error).message, destination: `${destination.namespace}/${destination.name}` }, "could not mark the destination's first consumer made: if it is disabled past the grace and enabled again, it will read the events stream from its first message again");
    });
    // stop() waits for it: a SIGTERM drained the connection under the last one (found by a review).
    this.#marking.add(marking);
    void marking.finally(() => this.#marking.delete(marking));
  }

  /**
   * ensureDestinationConsumer, saying what became of sources that left the destination: their
   * undelivered delete notifications moved to the DLQ, or, when it cannot take them (full), the
   * filter kept as it was (they are still read and delivered; a stopped destination would be
   * worse) and tried again every minute.
   */
  async #ensureConsumer(
    key: string,
    destination: CompiledDestination,
    options: Pick<Parameters<typeof ensureDestinationConsumer>[2] & object, "resumeAt" | "firstWanted" | "madeAs" | "onCreated"> = {},
  ): Promise<string> {
    const { log } = this.#deps;
    return ensureDestinationConsumer(this.#jsm, destination, {
      ...options,
      log,
      onSourcesRemoved: (removed) => {
        if ("moved" in removed) {
          this.#narrowing.delete(key);
          if (removed.moved.deletes > 0) log.error({ destination: key, filters: removed.filters, deleteNotifications: removed.moved.deletes }, SOURCE_REMOVED_MOVED);
          return;
        }
        this.#narrowing.add(key);
        if (this.#notMovedLog.pass(key) !== undefined) {
          log.error({ destination: key, filters: removed.filters, err: removed.error.message, retryInSeconds: NARROW_RETRY_MS / 1000 }, SOURCE_REMOVED_NOT_MOVED);
        }
        if (!this.#narrowRetry) {
          this.#narrowRetry = setTimeout(() => {
            this.#narrowRetry = undefined;
            if (!this.#stopped) void this.apply(this.#deps.config.current()).catch(() => {});
          }, NARROW_RETRY_MS);
          this.#narrowRetry.unref();
        }
      },
    });
  }

  /** Applies the latest config again after a pause that doubles while starts keep failing. */
  #retryLater(): void {
    if (this.#stopped || this.#retryTimer) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (!this.#stopped) void this.apply(this.#deps.config.current()).catch(() => {});
    }, this.#retryMs);
    this.#retryTimer.unref();
    this.#retryMs = Math.min(this.#retryMs * 2, START_RETRY_MAX_MS);
  }

  async #startWorker(key: string, destination: CompiledDestination): Promise<void> {
    const { log, sender, metrics, nc } = this.#deps;
    // Every destination has a reserve of the process's slots that the others cannot take:
    // slow receivers with a large maxInFlight cannot starve the other destinations.
    const share = this.#slots.share(destination.maxInFlight, destination.namespace);
    const ahead = pullAhead(this.#slots.max, this.#wantedPerTenant.size, this.#wantedPerTenant.get(destination.namespace) ?? 1);
    const worker: DestinationWorker = new DestinationWorker(destination, {
      nc, sender, log, metrics, share, turn: this.#turn, streamMaxAgeMs: this.#streamMaxAgeMs, jsm: this.#jsm, pullAhead: ahead,
      onConsumerLost: (last) => this.#recover(key, worker, last),
      ...(this.#deps.consumerCheckMs ? { consumerCheckMs: this.#deps.consumerCheckMs } : {}),
      ...(this.#deps.deadLetterRetryMs ? { deadLetterRetryMs: this.#deps.deadLetterRetryMs } : {}),
      ...(this.#deps.activity ? { activity: this.#deps.activity } : {}),
    });
    await worker.start().catch((err: unknown) => {
      share.close();
      throw err;
    });
    this.#workers.set(key, worker);
    metrics.destinationStarted(key);
    log.info({ destination: key, urls: destination.urls.length, sources: destination.sources }, "delivering");
    this.#sayIfWindowCut(key, worker);
  }

  /** An error line when the stream's max_age cuts a destination's retryWindow (retryWindowInForceMs). */
  #sayIfWindowCut(key: string, worker: DestinationWorker): void {
    const { retryWindowMs } = worker.destination;
    if (worker.retryWindowMs >= retryWindowMs) return;
    this.#deps.log.error(
      { destination: key, retryWindowMs, streamMaxAgeMs: this.#streamMaxAgeMs, retryWindowInForceMs: worker.retryWindowMs },
      "retryWindow is not well within the events stream's max_age: messages are dead-lettered after 90% of max_age instead, before the stream drops them (raise --stream-max-age, or shorten retryWindow)",
    );
  }

  /**
   * A running destination's consumer was deleted under it (ConsumerWatch). If the destination is
   * still wanted, by the latest config received (a config change that removes it, as the
   * operator's deletion comes with, must not bring its consumer back), the consumer is recreated
   * after the last acknowledged message seen, and a new worker pulls from it. Retried every few
   * seconds while NATS does not answer.
   */
  #recover(key: string, lost: DestinationWorker, last: ConsumerPosition | undefined): void {
    const { log } = this.#deps;
    const run = async () => {
      if (this.#stopped || this.#workers.get(key) !== lost) return;
      const latest = this.#deps.config.current().destinations.find((d) => d.enabled && `${d.namespace}/${d.name}` === key);
      // A change that restarts the worker will be applied; one that #apply takes in place (a
      // secret, headers) would leave the lost consumer lost: recover with the latest config.
      if (!latest || changeOf(latest, lost.destination) === "restart") return;
      const resumeAt = await this.#resumeFrom(last);
      let created = false;
      await ensureDestinationConsumer(this.#jsm, latest, { resumeAt, onCreated: () => (created = true) });
      // Every replica notices; one makes it, and only its start counts.
      if (created) {
        const start = "seq" in resumeAt ? { startSeq: resumeAt.seq } : { startTime: resumeAt.time };
        log.error(
          { destination: key, ...start, lastAckFloor: last?.ackFloor },
          "seq" in resumeAt
            ? "the destination's consumer was deleted under delivery; recreated after the last acknowledged message seen (the messages of up to the last 30 s may arrive twice, with the same delivery id)"
            : "the destination's consumer was deleted under delivery, and the events stream's sequence went back (restored from a backup?): recreated from when it was last seen, less a minute (messages of that minute may arrive twice, with the same delivery id)",
        );
      } else {
        log.warn({ destination: key }, "the destination's consumer was deleted under delivery and recreated by another replica; pulling from it again");
      }
      // The lost worker stays listed (stopped) until its successor runs: a start that fails is
      // retried below like the rest, not left for the next config change.
      await lost.stop();
      await this.#startWorker(key, latest);
    };
    this.#applying = this.#applying.catch(() => {}).then(run).catch((err: unknown) => {
      // NATS did not answer: the lost worker is still listed, so this can simply run again.
      log.error({ err: (err as Error).message, destination: key }, "the destination's consumer could not be recreated; trying again in 5 s");
      setTimeout(() => this.#recover(key, lost, last), 5_000).unref();
    });
  }

  /**
   * Where a recreated consumer starts: after the last acknowledged message, if that was in the
   * stream as it is; from the stream's start if the stream was recreated since (its sequence
   * numbers started again); from now if where it had got to was never seen.
   *
   * A stream restored from a backup (a volume snapshot, `nats stream restore`) is the same
   * stream, with the same creation time, but the sequence numbers after the backup are used again
   * by what ingest stored since: its last sequence is below the floor seen, or, once ingest has
   * stored past it, the message at the floor was stored after the consumer was last seen.
   * Starting after the floor, or at last_seq + 1, skipped what was stored since the restore: it
   * starts from when the consumer was last seen, less a margin (found by a disaster-recovery
   * review: 25 messages answered 200 never delivered; and by a diff review, once ingest had
   * stored past the old floor).
   */
  async #resumeFrom(last: ConsumerPosition | undefined): Promise<ResumePoint> {
    const { created, state } = await this.#jsm.streams.info(EVENTS_STREAM);
    if (!last) return { seq: state.last_seq + 1 };
    // An empty stream (just made again) has first_seq 0, which a consumer cannot start at.
    if (last.streamCreated !== created) return { seq: Math.max(1, state.first_seq) };
    if (last.ackFloor > state.last_seq || (await this.#storedAfter(last.ackFloor, last.seenAt))) {
      return { time: new Date(last.seenAt - ROLLED_BACK_MARGIN_MS).toISOString() };
    }
    return { seq: last.ackFloor + 1 };
  }

  /** Whether the message at `seq` was stored after `at`: its sequence used again since. Unknown (gone, none): false. */
  async #storedAfter(seq: number, at: number): Promise<boolean> {
    if (seq === 0) return false;
    const m = await this.#jsm.streams.getMessage(EVENTS_STREAM, { seq }).catch(() => null);
    return m !== null && m.time.getTime() > at;
  }

  async #removeConsumers(wanted: string[]): Promise<void> {
    if (wanted.length === 0) return;
    // What each still had to deliver goes with it: said, so a destination disabled past the grace
    // by mistake is seen to have lost messages (they stay in the events stream until max_age).
    const read = await Promise.all(wanted.map((name) => this.#jsm.consumers.info(EVENTS_STREAM, name).catch(() => undefined)));
    // A consumer still in use is another process's: deliver --config on several machines, each
    // with its own copy of the files, one of them changed first. Removing it under the others
    // made them make it again, from now, sending messages twice and skipping others (found by a
    // review of a VM install). In use: pulled from (this process's pulls ended with its worker,
    // and NATS drops those of a client gone), or, for a process busy with a backlog that sends
    // its next pull only once it has room (found by a review: removed under it all the same),
    // delivering or acking since this process's worker finished. The last process to drop it
    // removes it.
    const pulled = (i: number) => (read[i]?.num_waiting ?? 0) > 0 || activeSince(read[i], this.#drainedAt.get(wanted[i]!));
    const kept = wanted.filter((_, i) => pulled(i));
    for (const name of kept) this.#managed.delete(name);
    if (kept.length > 0) this.#deps.log.warn({ consumers: kept }, KEPT_FOR_OTHERS);
    // Said by the process whose delete removed it: several processes dropping it at once each
    // read the same backlog and moved the same notices (stored once: the DLQ keys them), and each
    // said so (found by a review: 37 lines for 20 consumers, an erasure reported moved three times;
    // and "undelivered: unknown" from one that found it gone).
    const js = jetstream(this.#deps.nc);
    const removed: string[] = [];
    const byOthers: string[] = [];
    const undelivered: Record<string, number | "unknown"> = {};
    for (const [i, name] of wanted.entries()) {
      if (pulled(i)) continue;
      const info = read[i];
      const moved = await deadLetterUndelivered(this.#jsm, js, info ?? name, "destination_disabled");
      this.#managed.delete(name);
      if ((await removeDestinationConsumers(this.#jsm, [name])) === 0) {
        byOthers.push(name);
        continue;
      }
      removed.push(name);
      undelivered[name] = info ? info.num_pending + info.num_ack_pending : "unknown";
      if (moved.deletes + moved.replayed > 0) this.#deps.log.error({ consumer: name, deleteNotifications: moved.deletes, replayed: moved.replayed }, UNDELIVERED_MOVED);
    }
    if (byOthers.length > 0) this.#deps.log.info({ consumers: byOthers }, ALREADY_REMOVED);
    if (removed.length === 0) return;
    if (Object.values(undelivered).some((n) => n !== 0)) {
      this.#deps.log.warn({ consumers: removed, undelivered }, "removed consumers of destinations no longer enabled, with messages they had not delivered: those are not sent (enabling the destination again starts from then)");
    } else this.#deps.log.info({ consumers: removed }, "removed consumers of destinations no longer enabled");
  }

  /**
   * The events stream's max_age, read again: ingest sets it (--stream-max-age), and a running
   * delivery that kept the old one let messages being retried age out of a stream made shorter,
   * with no dead letter, line or metric; or, made longer again, cut retry windows short (found by
   * a review). Messages already waiting for a retry later than the new max_age are still lost:
   * said when it shrinks.
   */
  async #readStreamMaxAge(): Promise<void> {
    if (this.#stopped || !isNatsConnected(this.#deps.nc)) return;
    const info = await this.#jsm.streams.info(EVENTS_STREAM).catch(() => undefined);
    if (!info) return; // gone or unreachable for now: the stream guard and the workers say so
    const maxAgeMs = info.config.max_age > 0 ? info.config.max_age / 1e6 : Infinity;
    if (maxAgeMs === this.#streamMaxAgeMs) return;
    const { log } = this.#deps;
    const shorter = maxAgeMs < this.#streamMaxAgeMs;
    const line = { stream: EVENTS_STREAM, maxAgeMs: Number.isFinite(maxAgeMs) ? maxAgeMs : null, wasMs: Number.isFinite(this.#streamMaxAgeMs) ? this.#streamMaxAgeMs : null };
    if (shorter) log.warn(line, "the events stream's max_age is shorter now: retry windows are cut to 90% of it; a message already waiting for a retry due later than that is dropped by the stream unsent, with no dead letter");
    else log.info(line, "the events stream's max_age changed: retry windows follow");
    this.#streamMaxAgeMs = maxAgeMs;
    for (const [key, worker] of this.#workers) {
      worker.streamMaxAgeChanged(maxAgeMs);
      this.#sayIfWindowCut(key, worker);
    }
  }

  /** Stops pulling and waits for in-flight deliveries. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#maxAgeTimer);
    this.#guard?.stop();
    clearTimeout(this.#retryTimer);
    clearTimeout(this.#narrowRetry);
    this.#unsubscribe();
    await this.#applying.catch(() => {});
    // Consumers awaiting removal stay, as for a destination removed while no process runs.
    for (const timer of this.#removals.values()) clearTimeout(timer);
    this.#removals.clear();
    await this.#applying.catch(() => {});
    await Promise.all([...this.#workers.values()].map((w) => w.stop()));
    this.#workers.clear();
    await Promise.all(this.#draining.values());
    await Promise.all(this.#marking);
    this.#turn.flush();
  }
}

/**
 * Whether the consumer delivered or had an ack since `sinceMs` (this host's clock; the server's
 * times are moved by the difference its `ts` shows, and a margin allows for what is left of it).
 */
function activeSince(info: ConsumerInfo | undefined, sinceMs: number | undefined): boolean {
  if (!info || sinceMs === undefined || info.ts === undefined) return false;
  const serverAhead = Date.parse(info.ts) - Date.now();
  const last = Math.max(Date.parse(String(info.delivered.last_active ?? "")) || 0, Date.parse(String(info.ack_floor.last_active ?? "")) || 0);
  return last - serverAhead > sinceMs + ACTIVITY_MARGIN_MS;
}

/** How a --config destination's consumer made now starts (#asMadeNow). */
type MadeNow = ConsumerToMake & { deliveredBefore?: boolean };

/** Clock and request time allowed between this process and the server when judging activity. */
const ACTIVITY_MARGIN_MS = 2_000;

async function waitForEventsStream(jsm: JetStreamManager, log: Logger): Promise<StreamInfo> {
  for (let warned = false; ; warned = true) {
    try {
      return await patiently(`reading stream ${EVENTS_STREAM}`, () => jsm.streams.info(EVENTS_STREAM), log);
    } catch (err) {
      if (!isStreamNotFound(err)) throw err;
      if (!warned) log.warn(`waiting for stream ${EVENTS_STREAM} (the ingest creates it at start)`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}
