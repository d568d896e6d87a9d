// The ingest's Prometheus metrics, on a registry of its own (no global state between app instances).
import { Gauge, Histogram, Registry } from "prom-client";
import { EVENTS_STREAM } from "../nats/mod.ts";
import { LabelRetirement, collectProcessMetrics, streamUseGauges, streamsRecreatedCounter, type StreamUse, TalliedCounter } from "../telemetry/mod.ts";

export class IngestMetrics {
  readonly registry = new Registry();
  /** Streams this process found missing and made again. */
  readonly streamsRecreated = streamsRecreatedCounter(this.registry);

  // Both are counted on every request: tallied, and added to prom-client when collected.
  readonly #requests = new TalliedCounter({
    name: "trackhook_ingest_requests_total",
    help: "HTTP requests answered by the ingest, by route, status and code",
    labelNames: ["route", "status", "code"] as const,
    registers: [this.registry],
  });
  readonly #messages = new TalliedCounter({
    name: "trackhook_ingest_messages_total",
    help: "Messages received, by source, outcome (accepted, not_accepted, failed) and reason",
    labelNames: ["source", "outcome", "reason"] as const,
    registers: [this.registry],
  });

  readonly #additionalKeys = new TalliedCounter({
    name: "trackhook_ingest_additional_key_requests_total",
    help: "Requests authenticated with one of a source's additional write keys, by source and the key's Secret and key",
    labelNames: ["source", "secret", "key"] as const,
    registers: [this.registry],
  });

  /** Every HTTP answer, by route, status and error code ("ok" for 2xx). */
  readonly requests = this.#requests.counter;
  /** Every message of every request: accepted, or not accepted with its reason. */
  readonly messages = this.#messages.counter;

  readonly publishDuration = new Histogram({
    name: "trackhook_ingest_publish_duration_seconds",
    help: "Time from JetStream publish to PubAck, per message",
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });

  readonly sources = new Gauge({
    name: "trackhook_ingest_sources",
    help: "Enabled sources in the config in force",
    registers: [this.registry],
  });

  #stream: () => Promise<StreamUse | undefined> = async () => undefined;
  readonly #retirement: LabelRetirement;

  constructor(options: { defaultMetrics?: boolean; retireAfterMs?: number } = {}) {
    if (options.defaultMetrics ?? true) collectProcessMetrics(this.registry);
    this.#retirement = new LabelRetirement((source) => {
      this.#messages.forget(source);
      this.#additionalKeys.forget(source);
    }, options.retireAfterMs);
    // The events stream keeps delivered messages too (limits retention, until max_age): when its
    // bytes reach max_bytes every request gets 503 storage_full, however small the lag. A scrape
    // reads the stream once for both gauges; while NATS does not answer neither has a series
    // (trackhook_nats_connected says why).
    let reading: Promise<StreamUse | undefined> | undefined;
    streamUseGauges(this.registry, {
      prefix: "trackhook_events_stream",
      stream: EVENTS_STREAM,
      bytesHelp: "Bytes stored in TRACKHOOK_EVENTS (delivered messages included, until max_age)",
      maxBytesHelp: "TRACKHOOK_EVENTS's max_bytes: at it, messages are refused with 503 storage_full",
      read: () => (reading ??= this.#stream().catch(() => undefined).finally(() => (reading = undefined))),
    });
  }

  /** Where the stream gauges read from at scrape time. */
  readStreamFrom(source: () => Promise<StreamUse | undefined>): void {
    this.#stream = source;
  }

  countRequest(route: string, status: number, code: string): void {
    this.#requests.add(route, status, code);
  }

  /** The sources accepted now: the series of one that left go `retireAfterMs` later. */
  sourcesInConfig(sources: Iterable<string>): void {
    this.#retirement.inConfig(sources);
  }

  countAdditionalKey(source: string, secret: string, key: string): void {
    this.#additionalKeys.add(source, secret, key);
  }

  countMessages(source: string, outcome: "accepted" | "not_accepted" | "failed", reason: string, count = 1): void {
    this.#messages.add(source, outcome, reason, count);
  }
}
