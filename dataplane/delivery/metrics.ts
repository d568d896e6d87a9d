// Delivery's Prometheus metrics, on a registry of its own.
import { Counter, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export class DeliveryMetrics {
  readonly registry = new Registry();

  readonly deliveries = new Counter({
    name: "trackhook_delivery_messages_total",
    help: "Messages handled per destination, by outcome (delivered, retry, dead_lettered, skipped) and reason",
    labelNames: ["destination", "outcome", "reason"] as const,
    registers: [this.registry],
  });

  readonly attempts = new Counter({
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

  constructor(options: { defaultMetrics?: boolean } = {}) {
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }
}
