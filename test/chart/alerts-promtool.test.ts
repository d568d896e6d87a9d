// The chart's alerts evaluated by Prometheus's own rule engine (`promtool test rules`) against the
// made-up series of alerts.promtool.yaml: each fires when it should, names what it should, and
// stays quiet on a healthy system. alerts.test.ts checks that their metrics exist; this checks
// what the expressions, their `for` and their summaries do with them, and that the Grafana
// dashboard's queries parse.
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { tempDir } from "../harness/temp.ts";
import { render, repoRoot, runTool, type Manifest } from "./helm.ts";
import { exported, TARGET_LABELS } from "./metrics.ts";

const CASES = fileURLToPath(new URL("./alerts.promtool.yaml", import.meta.url));

interface AlertCase { alertname: string; exp_alerts?: unknown[] }
interface PromtoolTest { input_series: Array<{ series: string }>; alert_rule_test: AlertCase[] }

async function promtool(args: string[], cwd: string): Promise<{ code: number; output: string }> {
  const { code, stdout, stderr } = await runTool("promtool", args, { cwd });
  return { code, output: stdout + stderr };
}

/** The rendered PrometheusRule's groups as a Prometheus rule file, beside a copy of the cases. */
async function rulesDir(): Promise<{ dir: string; alerts: string[] }> {
  const [rule] = (await render({ set: { "metrics.prometheusRule.enabled": "true" } })).filter((m: Manifest) => m.kind === "PrometheusRule");
  const groups = rule!.spec.groups as Array<{ rules: Array<{ alert: string }> }>;
  const dir = tempDir("promtool");
  writeFileSync(join(dir, "rules.yaml"), stringify({ groups }));
  copyFileSync(CASES, join(dir, "alerts.promtool.yaml"));
  return { dir, alerts: groups.flatMap((g) => g.rules.map((r) => r.alert)) };
}

describe("the chart's alerts, evaluated by promtool", () => {
  const tests = (parse(readFileSync(CASES, "utf8")) as { tests: PromtoolTest[] }).tests;

  it("has, for every alert, a case where it fires and one where it must not", async () => {
    const { alerts } = await rulesDir();
    expect(alerts.length).toBeGreaterThanOrEqual(18);
    const cases = tests.flatMap((t) => t.alert_rule_test);
    for (const alert of alerts) {
      const mine = cases.filter((c) => c.alertname === alert);
      expect(mine.some((c) => (c.exp_alerts ?? []).length > 0), `${alert} has a case where it fires`).toBe(true);
      expect(mine.some((c) => (c.exp_alerts ?? []).length === 0), `${alert} has a case where it stays quiet`).toBe(true);
    }
    for (const c of cases) expect(alerts, `a case names ${c.alertname}, which the chart does not have`).toContain(c.alertname);
  });

  it("feeds them only series trackhook exports, with their labels", async () => {
    const metrics = await exported();
    for (const { series } of tests.flatMap((t) => t.input_series)) {
      const [, name, labels] = /^([a-z_]+)\{(.*)\}$/.exec(series) ?? [];
      // `up` of another job: no trackhook series at all.
      if (name === "up") continue;
      expect(metrics.has(name!), `${series}: ${name} is not exported by any component`).toBe(true);
      for (const [, label] of labels!.matchAll(/([a-z_]+)="/g)) expect([...metrics.get(name!)!, ...TARGET_LABELS], `${series}: ${name} has no label ${label}`).toContain(label);
    }
  });

  it("the Grafana dashboard's queries are PromQL Prometheus parses", async () => {
    const dashboard = JSON.parse(readFileSync(join(repoRoot, "charts", "trackhook", "dashboards", "trackhook.json"), "utf8")) as { panels: Array<{ title: string; targets?: Array<{ expr: string }> }> };
    // Grafana's variables, as Grafana would fill them in.
    const filled = (expr: string) => expr.replaceAll("$__rate_interval", "5m").replaceAll("$namespace", "trackhook").replaceAll("$destination", ".*");
    const queries = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ title: p.title, expr: filled(t.expr) })));
    expect(queries.length).toBeGreaterThanOrEqual(15);
    for (const { title, expr } of queries) expect(expr, `${title}: a Grafana variable promtool cannot read`).not.toMatch(/\$/);
    // promtool parses the expressions of a rule file: each query as a recording rule.
    const dir = tempDir("promtool-dashboard");
    writeFileSync(join(dir, "dashboard.yaml"), stringify({ groups: [{ name: "dashboard", rules: queries.map((q, i) => ({ record: `dashboard:query_${i}`, expr: q.expr })) }] }));
    const checked = await promtool(["check", "rules", "--lint=none", "dashboard.yaml"], dir);
    expect(checked.code, checked.output).toBe(0);
  });

  it("fires each alert as the cases expect", async () => {
    const { dir } = await rulesDir();
    const checked = await promtool(["check", "rules", "rules.yaml"], dir);
    expect(checked.code, checked.output).toBe(0);
    const tested = await promtool(["test", "rules", "alerts.promtool.yaml"], dir);
    expect(tested.code, tested.output).toBe(0);
    expect(tested.output).toContain("SUCCESS");
  });
});
