// The operator's Prometheus metrics, named after controller-runtime's so dashboards carry over.
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { collectProcessMetrics, streamsRecreatedCounter } from "../dataplane/telemetry/mod.ts";

export class OperatorMetrics {
  readonly registry = new Registry();
  /** Streams this process found missing and made again. */
  readonly streamsRecreated = streamsRecreatedCounter(this.registry);
  readonly reconciles = new Counter({
    name: "trackhook_operator_reconcile_total",
    help: "Reconciles by kind and result (success, error, requeue)",
    labelNames: ["kind", "result"] as const,
    registers: [this.registry],
  });
  readonly reconcileSeconds = new Histogram({
    name: "trackhook_operator_reconcile_duration_seconds",
    help: "Time one reconcile took, by kind",
    labelNames: ["kind"] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  readonly queueDepth = new Gauge({
    name: "trackhook_operator_queue_depth",
    help: "Objects waiting for a reconcile, by kind",
    labelNames: ["kind"] as const,
    registers: [this.registry],
  });
  readonly leader = new Gauge({
    name: "trackhook_operator_leader",
    help: "1 while this process holds the leader lease and reconciles, else 0",
    registers: [this.registry],
  });
  readonly notifications = new Counter({
    name: "trackhook_operator_delete_notifications_total",
    help: "Delete notifications by outcome: stored for delivery, duplicate (stored before), dead_lettered (their destination was disabled or deleted before it delivered them)",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });

  /** What the resources gauge counts, at scrape time (the leader's caches; none on a standby). */
  #resources: () => Array<{ kind: string; ready: string; reason: string }> = () => [];
  #watches: () => Array<{ resource: string; failingSeconds: number }> = () => [];

  constructor() {
    collectProcessMetrics(this.registry);
    // Every outcome from 0: an alert on increase() misses a series' first appearance.
    for (const outcome of ["stored", "duplicate", "dead_lettered"]) this.notifications.inc({ outcome }, 0);
    const resources = () => this.#resources();
    const watches = () => this.#watches();
    new Gauge({
      name: "trackhook_operator_watch_failing_seconds",
      help: "How long the list and watch of a kind (sources, webhookdestinations, deletionrequests, secrets) have been failing, 0 while they work: changes to it are not heard of meanwhile",
      labelNames: ["resource"] as const,
      registers: [this.registry],
      collect() {
        this.reset();
        for (const w of watches()) this.set({ resource: w.resource }, w.failingSeconds);
      },
    });
    new Gauge({
      name: "trackhook_operator_resources",
      help: "Sources, WebhookDestinations and DeletionRequests by kind and Ready condition (status and reason), as the leader sees them",
      labelNames: ["kind", "ready", "reason"] as const,
      registers: [this.registry],
      collect() {
        this.reset();
        for (const r of resources()) this.inc({ kind: r.kind, ready: r.ready, reason: r.reason });
      },
    });
  }

  /** Where the watch gauge reads from (the leader's reflectors). */
  readWatchesFrom(source: () => Array<{ resource: string; failingSeconds: number }>): void {
    this.#watches = source;
  }

  /** Where the resources gauge reads from (the operator's caches). */
  readResourcesFrom(source: () => Array<{ kind: string; ready: string; reason: string }>): void {
    this.#resources = source;
  }
}
