// The chart's PrometheusRule names only metrics and labels trackhook really exports: an alert on a
// misspelt metric never fires, and nothing says so. Every expression's trackhook_* metric is
// looked up in the registries the ingest, delivery and the operator serve, and every label it
// selects or groups by must be one of that metric's labels (or one Prometheus adds when it scrapes).
import { describe, expect, it } from "vitest";
import { Registry } from "prom-client";
import { ConfigHolder, configMetrics } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics } from "../../dataplane/delivery/mod.ts";
import { IngestMetrics } from "../../dataplane/ingest/metrics.ts";
import { natsConnectedGauge } from "../../dataplane/nats/mod.ts";
import { OperatorMetrics } from "../../operator/metrics.ts";
import { render, type Manifest } from "./helm.ts";

/** Labels a ServiceMonitor's scrape adds to every series. */
const TARGET_LABELS = ["namespace", "pod", "job", "instance", "service", "container", "endpoint"];

/** Every trackhook metric the components export, with its label names. */
async function exported(): Promise<Map<string, string[]>> {
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

describe("the chart's PrometheusRule", () => {
  it("alerts only on metrics and labels that trackhook exports", async () => {
    const rules = (await render({ set: { "metrics.prometheusRule.enabled": "true" } })).filter((m: Manifest) => m.kind === "PrometheusRule");
    expect(rules).toHaveLength(1);
    const alerts = (rules[0]!.spec.groups as Array<{ rules: Array<{ alert: string; expr: string }> }>).flatMap((g) => g.rules);
    expect(alerts.length).toBeGreaterThanOrEqual(10);
    const metrics = await exported();
    for (const { alert, expr } of alerts) {
      const used = [...expr.matchAll(/\b(trackhook_[a-z_]+)(\{[^}]*\})?/g)];
      expect(used.length, `${alert} uses a trackhook metric`).toBeGreaterThan(0);
      for (const [, name, selector] of used) {
        const labels = metrics.get(name!);
        expect(labels, `${alert}: ${name} is not exported by any component`).toBeDefined();
        const known = [...labels!, ...TARGET_LABELS];
        for (const [, label] of (selector ?? "").matchAll(/([a-z_]+)\s*(=~|!=|!~|=)/g)) expect(known, `${alert}: ${name} has no label ${label}`).toContain(label);
      }
      for (const [, by] of expr.matchAll(/by \(([^)]*)\)/g)) {
        const names = by!.split(",").map((l) => l.trim());
        const metricLabels = used.flatMap(([, name]) => metrics.get(name!) ?? []);
        for (const label of names) expect([...metricLabels, ...TARGET_LABELS], `${alert}: groups by ${label}, which its metrics lack`).toContain(label);
      }
    }
  });

  it("is not rendered unless asked for", async () => {
    expect((await render()).filter((m: Manifest) => m.kind === "PrometheusRule")).toEqual([]);
  });
});
