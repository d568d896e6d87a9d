// The ingest's Prometheus metrics, on a registry of its own (no global state between app instances).
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export class IngestMetrics {
  readonly registry = new Registry();

  /** Every HTTP answer, by route, status and error code ("ok" for 2xx). */
  readonly requests = new Counter({
    name: "trackhook_ingest_requests_total",
    help: "HTTP requests answered by the ingest, by route, status and code",
    labelNames: ["route", "status", "code"] as const,
    registers: [this.registry],
  });

  /** Every message of every request: accepted, or not accepted with its reason. */
  readonly messages = new Counter({
    name: "trackhook_ingest_messages_total",
    help: "Messages received, by source, outcome (accepted, not_accepted, failed) and reason",
    labelNames: ["source", "outcome", "reason"] as const,
    registers: [this.registry],
  });

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

  constructor(options: { defaultMetrics?: boolean } = {}) {
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  // prom-client hashes a label object on every inc(); on the hot path the label-bound children
  // are kept instead, keyed by a plain string.
  readonly #requestChildren = new Map<string, { inc(): void }>();
  readonly #messageChildren = new Map<string, { inc(value?: number): void }>();

  countRequest(route: string, status: number, code: string): void {
    const key = `${route} ${status} ${code}`;
    let child = this.#requestChildren.get(key);
    if (!child) this.#requestChildren.set(key, (child = this.requests.labels(route, String(status), code)));
    child.inc();
  }

  countMessages(source: string, outcome: "accepted" | "not_accepted" | "failed", reason: string, count = 1): void {
    const key = `${source} ${outcome} ${reason}`;
    let child = this.#messageChildren.get(key);
    if (!child) this.#messageChildren.set(key, (child = this.messages.labels(source, outcome, reason)));
    child.inc(count);
  }
}
