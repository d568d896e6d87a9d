// The chart's PrometheusRule names only metrics and labels trackhook really exports: an alert on a
// misspelt metric never fires, and nothing says so. Every expression's trackhook_* metric is
// looked up in the registries the ingest, delivery and the operator serve, and every label it
// selects or groups by must be one of that metric's labels (or one Prometheus adds when it scrapes).
// The Grafana dashboard's queries are held to the same.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { render, repoRoot, type Manifest } from "./helm.ts";
import { exported, TARGET_LABELS } from "./metrics.ts";

/** Every trackhook_* metric an expression names is exported, with the labels it selects and groups by. */
function expectExported(metrics: Map<string, string[]>, what: string, expr: string): void {
  // A histogram's series: its name with _bucket, _sum or _count.
  const used = [...expr.matchAll(/\b(trackhook_[a-z_]+)(\{[^}]*\})?/g)].map(([, name, selector]) => [metrics.has(name!) ? name! : name!.replace(/_(bucket|sum|count)$/, ""), selector] as const);
  expect(used.length, `${what} uses a trackhook metric`).toBeGreaterThan(0);
  for (const [name, selector] of used) {
    const labels = metrics.get(name);
    expect(labels, `${what}: ${name} is not exported by any component`).toBeDefined();
    const known = [...labels!, ...TARGET_LABELS, ...(name.endsWith("_seconds") ? ["le"] : [])];
    for (const [, label] of (selector ?? "").matchAll(/([a-z_]+)\s*(=~|!=|!~|=)/g)) expect(known, `${what}: ${name} has no label ${label}`).toContain(label);
  }
  for (const [, by] of expr.matchAll(/by \(([^)]*)\)/g)) {
    const names = by!.split(",").map((l) => l.trim());
    const metricLabels = used.flatMap(([name]) => [...(metrics.get(name) ?? []), ...(name.endsWith("_seconds") ? ["le"] : [])]);
    for (const label of names) expect([...metricLabels, ...TARGET_LABELS], `${what}: groups by ${label}, which its metrics lack`).toContain(label);
  }
}

describe("the chart's PrometheusRule", () => {
  it("alerts only on metrics and labels that trackhook exports", async () => {
    const rules = (await render({ set: { "metrics.prometheusRule.enabled": "true" } })).filter((m: Manifest) => m.kind === "PrometheusRule");
    expect(rules).toHaveLength(1);
    const alerts = (rules[0]!.spec.groups as Array<{ rules: Array<{ alert: string; expr: string }> }>).flatMap((g) => g.rules);
    expect(alerts.length).toBeGreaterThanOrEqual(10);
    const metrics = await exported();
    for (const { alert, expr } of alerts) expectExported(metrics, alert, expr);
  });

  it("is the table of docs/operations.md's Alerts section: every alert, with its `for` and severity (critical said, warning not)", async () => {
    const [rule] = (await render({ set: { "metrics.prometheusRule.enabled": "true" } })).filter((m: Manifest) => m.kind === "PrometheusRule");
    const alerts = (rule!.spec.groups as Array<{ rules: Array<{ alert: string; for?: string; labels: { severity: string } }> }>).flatMap((g) => g.rules);
    const doc = readFileSync(join(repoRoot, "docs", "operations.md"), "utf8");
    const rows = new Map([...doc.matchAll(/^\| `(Trackhook\w+)`( \(([^)]*)\))? \|/gm)].map(([, name, , said]) => [name!, said ?? ""]));
    for (const { alert, for: wait, labels } of alerts) {
      expect(rows.has(alert), `docs/operations.md has no row for ${alert}`).toBe(true);
      expect(rows.get(alert), alert).toBe([wait, labels.severity === "critical" ? "critical" : undefined].filter(Boolean).join(", "));
    }
    expect([...rows.keys()].sort()).toEqual(alerts.map((a) => a.alert).sort());
  });

  it("is not rendered unless asked for", async () => {
    expect((await render()).filter((m: Manifest) => m.kind === "PrometheusRule")).toEqual([]);
  });
});

describe("the chart's Grafana dashboard", () => {
  interface Panel { type: string; title: string; id: number; gridPos: { x: number; y: number; w: number; h: number }; targets?: Array<{ expr: string }> }
  const dashboardOf = async (set: Record<string, string> = {}) => {
    const maps = (await render({ set: { "metrics.grafanaDashboard.enabled": "true", ...set } })).filter((m: Manifest) => m.kind === "ConfigMap" && m.metadata.name.endsWith("-dashboard"));
    expect(maps).toHaveLength(1);
    return { map: maps[0]!, dashboard: JSON.parse((maps[0]!.data as Record<string, string>)["trackhook.json"]!) as { uid: string; panels: Panel[]; templating: { list: Array<{ name: string }> } } };
  };

  it("is a ConfigMap Grafana's sidecar picks up, whose every query names metrics and labels trackhook exports", async () => {
    const { map, dashboard } = await dashboardOf();
    expect(map.metadata.labels).toMatchObject({ grafana_dashboard: "1", "app.kubernetes.io/part-of": "trackhook" });
    expect(dashboard.uid).toBe("trackhook");
    expect(dashboard.templating.list.map((v) => v.name)).toEqual(["datasource", "namespace", "destination"]);
    const metrics = await exported();
    const queried = dashboard.panels.filter((p) => p.type !== "row");
    expect(queried.length).toBeGreaterThanOrEqual(15);
    for (const panel of queried) {
      expect(panel.targets?.length, `${panel.title} has a query`).toBeGreaterThan(0);
      for (const { expr } of panel.targets!) expectExported(metrics, panel.title, expr);
    }
    // The metrics an operator looks at first each have a panel.
    const all = queried.flatMap((p) => p.targets!.map((t) => t.expr)).join("\n");
    for (const name of ["trackhook_delivery_oldest_message_age_seconds", "trackhook_delivery_url_paused", "trackhook_delivery_dead_letters", "trackhook_ingest_requests_total"]) expect(all).toContain(name);
  });

  it("lays its panels out on Grafana's 24-column grid without overlaps, each with its own id", async () => {
    const { dashboard } = await dashboardOf();
    const { panels } = dashboard;
    expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length);
    for (const [i, a] of panels.entries()) {
      expect(a.gridPos.x + a.gridPos.w, a.title).toBeLessThanOrEqual(24);
      for (const b of panels.slice(i + 1)) {
        const apart = a.gridPos.x + a.gridPos.w <= b.gridPos.x || b.gridPos.x + b.gridPos.w <= a.gridPos.x || a.gridPos.y + a.gridPos.h <= b.gridPos.y || b.gridPos.y + b.gridPos.h <= a.gridPos.y;
        expect(apart, `${a.title} overlaps ${b.title}`).toBe(true);
      }
    }
  });

  it("goes to the namespace, label and folder asked for, and is not rendered unless asked for", async () => {
    const { map } = await dashboardOf({ "metrics.grafanaDashboard.namespace": "monitoring", "metrics.grafanaDashboard.label": "dashboards", "metrics.grafanaDashboard.labelValue": "trackhook", "metrics.grafanaDashboard.folder": "Analytics" });
    expect(map.metadata.namespace).toBe("monitoring");
    expect(map.metadata.labels).toMatchObject({ dashboards: "trackhook" });
    expect(map.metadata.annotations).toEqual({ grafana_folder: "Analytics" });
    expect((await render()).filter((m: Manifest) => m.kind === "ConfigMap" && m.metadata.name.endsWith("-dashboard"))).toEqual([]);
  });
});
