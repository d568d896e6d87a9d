// Delivery's Prometheus metrics, on a registry of its own.
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { ATTEMPTS_STREAM, DLQ_STREAM } from "../nats/mod.ts";
import { LabelRetirement, collectProcessMetrics, streamUseGauges, streamsRecreatedCounter, type StreamUse, TalliedCounter } from "../telemetry/mod.ts";

/** Per-destination figures read from JetStream when metrics are scraped. */
export interface DeliveryBacklog {
  destination: string;
  /** Messages stored but not yet delivered to this destination's consumer (lag). */
  pending: number;
  /** Delivered to the worker and not yet acked, retries waiting included. */
  inFlight: number;
  deadLetters: number;
  /** Age of the oldest message not yet delivered or dead-lettered (0: none waits; undefined: unknown). */
  oldestAgeSeconds: number | undefined;
}

/** What a scrape reads from JetStream: per destination, and how full the dead-letter and attempt streams are. */
export interface DeliveryBacklogs {
  destinations: DeliveryBacklog[];
  deadLetterStream?: StreamUse;
  attemptsStream?: StreamUse;
}

/** A webhook URL no message is sent to for now (redacted, as logs show it), and why. */
export interface PausedUrl {
  /** Its position in the destination's `urls` (from 0). */
  index: number;
  url: string;
  reason: "unreachable" | "retry_after";
}

/** What the per-destination gauges read from the delivery service at scrape time. */
export interface DestinationState {
  destination: string;
  running: boolean;
  pausedUrls: PausedUrl[];
  /** The retry window in force (seconds), when running. */
  retryWindowSeconds?: number;
}

/** Why a message is dead-lettered, and why a dead letter is not stored (the alerts' series). */
export const DEAD_LETTER_REASONS = ["permanent_failure", "retry_window_exhausted", "invalid_message", "destination_disabled", "destination_deleted", "source_removed"] as const;
export const DEAD_LETTER_FAILURES = ["dead_letter_stream_full", "dead_letter_destination_full", "dead_letter_not_stored"] as const;
export type DeadLetterReason = (typeof DEAD_LETTER_REASONS)[number];
export type DeadLetterFailure = (typeof DEAD_LETTER_FAILURES)[number];

/** The labels for the usual classes, built once. */
const STATUS_CLASS: Record<number, string> = { 1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx" };

export class DeliveryMetrics {
  readonly registry = new Registry();
  /** Streams this process found missing and made again (the ingest's counter, when one process runs both). */
  readonly streamsRecreated: Counter<"stream">;

  // Both are counted per message or attempt: tallied, and added to prom-client when collected
  // (read them from the registry).
  readonly #deliveries = new TalliedCounter({
    name: "trackhook_delivery_messages_total",
    help: "Messages handled per destination, by outcome (delivered, retry, dead_lettered, dead_letter_failed, skipped) and reason",
    labelNames: ["destination", "outcome", "reason"] as const,
    registers: [this.registry],
  });
  readonly #attempts = new TalliedCounter({
    name: "trackhook_delivery_attempts_total",
    help: "HTTP attempts per destination, by status class (2xx, 4xx, 5xx, error) and error code",
    labelNames: ["destination", "status_class", "error"] as const,
    registers: [this.registry],
  });

  readonly attemptDuration = new Histogram({
    name: "trackhook_delivery_attempt_duration_seconds",
    help: "Time of one HTTP attempt, from send to the end of the response (or the error)",
    labelNames: ["destination"] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });

  /**
   * Delete notifications apart: an erasure a receiver never got must be noticed (alert on
   * dead_lettered). Rare enough for prom-client's own counting.
   */
  readonly #deleteNotifications = new Counter({
    name: "trackhook_delivery_delete_notifications_total",
    help: "Delete notifications (user erasure) per destination, by outcome (delivered, dead_lettered)",
    labelNames: ["destination", "outcome"] as const,
    registers: [this.registry],
  });

  readonly #retirement: LabelRetirement;

  #backlog: () => Promise<DeliveryBacklogs> = async () => ({ destinations: [] });
  #destinations: () => DestinationState[] = () => [];

  countDeleteNotification(destination: string, outcome: "delivered" | "dead_lettered"): void {
    this.#deleteNotifications.inc({ destination, outcome });
  }

  countDelivery(destination: string, outcome: "delivered" | "retry" | "dead_lettered" | "dead_letter_failed" | "skipped", reason = ""): void {
    this.#deliveries.add(destination, outcome, reason);
  }

  /** One HTTP attempt: counted by status class (or "error") and error code, and timed. */
  countAttempt(destination: string, status: number | undefined, error: string | undefined, latencyMs: number): void {
    this.#attempts.add(destination, status ? (STATUS_CLASS[Math.floor(status / 100)] ?? `${Math.floor(status / 100)}xx`) : "error", error ?? "");
    this.attemptDuration.observe({ destination }, latencyMs / 1000);
  }

  /**
   * A destination's worker started: its alerting series exist from now, at 0. Prometheus's
   * increase() ignores a series' first sample, so a first burst of dead letters (or one erasure
   * not delivered) that came within one scrape, on a series that did not exist before, alerted
   * nobody.
   */
  destinationStarted(destination: string): void {
    for (const reason of DEAD_LETTER_REASONS) this.#deliveries.add(destination, "dead_lettered", reason, 0);
    for (const reason of DEAD_LETTER_FAILURES) this.#deliveries.add(destination, "dead_letter_failed", reason, 0);
    for (const outcome of ["delivered", "dead_lettered"]) this.#deleteNotifications.inc({ destination, outcome }, 0);
  }

  /** The destinations delivered now: the series of one that left go `retireAfterMs` later. */
  destinationsInConfig(destinations: Iterable<string>): void {
    this.#retirement.inConfig(destinations);
  }

  constructor(options: { defaultMetrics?: boolean; retireAfterMs?: number; streamsRecreated?: Counter<"stream"> } = {}) {
    if (options.defaultMetrics ?? true) collectProcessMetrics(this.registry);
    this.streamsRecreated = options.streamsRecreated ?? streamsRecreatedCounter(this.registry);
    this.#retirement = new LabelRetirement((destination) => {
      this.#deliveries.forget(destination);
      this.#attempts.forget(destination);
      this.attemptDuration.remove({ destination });
      for (const outcome of ["delivered", "dead_lettered"]) this.#deleteNotifications.remove({ destination, outcome });
    }, options.retireAfterMs);
    // collect() runs with `this` bound to the gauge; the arrow keeps the metrics object at hand.
    // A scrape collects the gauges at once: they share one read of JetStream.
    let reading: Promise<DeliveryBacklogs> | undefined;
    const readBacklog = () =>
      (reading ??= this.#backlog()
        .catch((): DeliveryBacklogs => ({ destinations: [] }))
        .finally(() => (reading = undefined)));
    const gauge = (name: string, help: string, pick: (b: DeliveryBacklog) => number | undefined) =>
      new Gauge({
        name,
        help,
        labelNames: ["destination"] as const,
        registers: [this.registry],
        async collect() {
          this.reset();
          for (const b of (await readBacklog()).destinations) {
            const value = pick(b);
            if (value !== undefined) this.set({ destination: b.destination }, value);
          }
        },
      });
    // A full dead-letter stream refuses dead letters: such messages stay in delivery, retried each
    // minute, and are lost if the events stream drops them first (its max_age). Alert before.
    streamUseGauges(this.registry, {
      prefix: "trackhook_dead_letter_stream",
      stream: DLQ_STREAM,
      bytesHelp: "Bytes stored in TRACKHOOK_DLQ",
      maxBytesHelp: "TRACKHOOK_DLQ's max_bytes: at it, dead letters are refused (trackhook_delivery_messages_total{outcome=\"dead_letter_failed\"})",
      read: async () => (await readBacklog()).deadLetterStream,
    });
    // Oldest records make room in a full attempts stream: its fill says how much history is kept.
    streamUseGauges(this.registry, {
      prefix: "trackhook_attempts_stream",
      stream: ATTEMPTS_STREAM,
      bytesHelp: "Bytes stored in TRACKHOOK_ATTEMPTS",
      maxBytesHelp: "TRACKHOOK_ATTEMPTS's max_bytes: at it, the oldest attempt records make room",
      read: async () => (await readBacklog()).attemptsStream,
    });
    gauge("trackhook_delivery_consumer_pending_messages", "Messages not yet handed to delivery, per destination (consumer lag)", (b) => b.pending);
    gauge("trackhook_delivery_in_flight_messages", "Messages in delivery or waiting for a retry, per destination", (b) => b.inFlight);
    // Lag in messages depends on the traffic; this is what a receiver's users feel, and what the
    // retry window (then the stream's max_age) is measured against.
    gauge("trackhook_delivery_oldest_message_age_seconds", "Age of the oldest message not yet delivered or dead-lettered, per destination (0 when none waits)", (b) => b.oldestAgeSeconds);
    gauge("trackhook_delivery_dead_letters", "Messages in the dead-letter queue, per destination", (b) => b.deadLetters);
    // Gauges read from the destinations' state (no I/O): each scrape sets one series per entry of `each`.
    const stateGauge = <L extends string>(name: string, help: string, labelNames: readonly L[], each: (d: DestinationState) => Iterable<[Record<L, string>, number]>) => {
      const destinations = () => this.#destinations();
      return new Gauge({
        name,
        help,
        labelNames,
        registers: [this.registry],
        collect() {
          this.reset();
          for (const d of destinations()) for (const [labels, value] of each(d)) this.set(labels, value);
        },
      });
    };
    stateGauge("trackhook_delivery_destination_up", "1 per enabled destination this process delivers; 0 while it cannot start (it is retried)", ["destination"], (d) => [[{ destination: d.destination }, d.running ? 1 : 0]]);
    // What the oldest message's age is measured against: a fixed age to alert at would come after
    // the dead letters for a destination with a short window.
    stateGauge("trackhook_delivery_retry_window_seconds", "The retry window in force per destination: a message not delivered within it is dead-lettered", ["destination"], (d) =>
      d.retryWindowSeconds === undefined ? [] : [[{ destination: d.destination }, d.retryWindowSeconds]]);
    // A destination with one of its URLs dead still delivers through the others: nothing dead-
    // letters, and without this nobody hears that a receiver has been down for hours.
    stateGauge(
      "trackhook_delivery_url_paused",
      "1 per webhook URL (its position in spec.urls, and redacted) that no message is sent to for now, by reason: unreachable (no answer; the next message after the pause probes it) or retry_after (the receiver asked)",
      ["destination", "url_index", "url", "reason"],
      (d) => d.pausedUrls.map((p) => [{ destination: d.destination, url_index: String(p.index), url: p.url, reason: p.reason }, 1]),
    );
  }

  /** Where the destination gauge reads from at scrape time (the delivery service). */
  readDestinationsFrom(source: () => DestinationState[]): void {
    this.#destinations = source;
  }

  /** Where the backlog gauges read from at scrape time (the delivery service). */
  readBacklogFrom(source: () => Promise<DeliveryBacklogs>): void {
    this.#backlog = source;
  }
}
