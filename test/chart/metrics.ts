// The metrics trackhook's components export, for the tests that hold the chart's alerts and
// dashboard to them (alerts.test.ts, alerts-promtool.test.ts).
import { Registry } from "prom-client";
import { ConfigHolder, configMetrics } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics } from "../../dataplane/delivery/mod.ts";
import { IngestMetrics } from "../../dataplane/ingest/metrics.ts";
import { natsConnectedGauge } from "../../dataplane/nats/mod.ts";
import { OperatorMetrics } from "../../operator/metrics.ts";

/** Labels a ServiceMonitor's scrape adds to every series. */
export const TARGET_LABELS = ["namespace", "pod", "job", "instance", "service", "container", "endpoint"];

/** Every trackhook metric the components export, with its label names. */
export async function exported(): Promise<Map<string, string[]>> {
  const registries = [new IngestMetrics({ defaultMetrics: false }).registry, new DeliveryMetrics({ defaultMetrics: false }).registry, new OperatorMetrics().registry];
  // Registered by the commands beside each component's own metrics.
  const extra = new Registry();
  natsConnectedGauge(extra, { isClosed: () => false, status: () => (async function* () {})() } as never);
  configMetrics(extra, new ConfigHolder());
  registries.push(extra);
  const metrics = new Map<string, string[]>();
  for (const registry of registries) {
    for (const m of registry.getMetricsAsArray()) metrics.set(m.name, [...((m as unknown as { labelNames?: string[] }).labelNames ?? [])]);
  }
  return metrics;
}

