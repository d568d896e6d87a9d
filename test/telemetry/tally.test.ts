// A tallied counter must show on /metrics exactly what prom-client's own inc() would have shown,
// at every scrape, without counting anything twice.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { TalliedCounter } from "../../dataplane/telemetry/tally.ts";

const NAME = "test_answers_total";

function tallied() {
  const registry = new Registry();
  const tally = new TalliedCounter({ name: NAME, help: "answers", labelNames: ["route", "status", "code"] as const, registers: [registry] });
  return { registry, tally };
}

const values = async (registry: Registry) =>
  (await registry.getSingleMetric(NAME)!.get()).values.map((v) => ({ ...v.labels, value: v.value })).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));

describe("TalliedCounter", () => {
  it("shows each label combination's count, numbers as strings, when collected", async () => {
    const { registry, tally } = tallied();
    tally.add("/v1/track", 200, "ok");
    tally.add("/v1/track", 200, "ok", 2);
    tally.add("/v1/track", 400, "invalid_json");
    tally.add("/v1/batch", 200, "ok");
    expect(await values(registry)).toEqual([
      { route: "/v1/batch", status: "200", code: "ok", value: 1 },
      { route: "/v1/track", status: "200", code: "ok", value: 3 },
      { route: "/v1/track", status: "400", code: "invalid_json", value: 1 },
    ]);
    expect(await registry.metrics()).toContain(`${NAME}{route="/v1/track",status="200",code="ok"} 3`);
  });

  it("adds only what was counted since the last scrape, so repeated scrapes count nothing twice", async () => {
    const { registry, tally } = tallied();
    tally.add("/v1/track", 200, "ok", 5);
    await registry.metrics();
    await registry.metrics();
    tally.add("/v1/track", 200, "ok");
    expect(await values(registry)).toEqual([{ route: "/v1/track", status: "200", code: "ok", value: 6 }]);
  });

  it("a series added at 0 is shown at 0, so that Prometheus's increase() counts its first real increment", async () => {
    const { registry, tally } = tallied();
    tally.add("/v1/track", 503, "storage_full", 0);
    expect(await values(registry)).toEqual([{ route: "/v1/track", status: "503", code: "storage_full", value: 0 }]);
    tally.add("/v1/track", 503, "storage_full");
    expect(await values(registry)).toEqual([{ route: "/v1/track", status: "503", code: "storage_full", value: 1 }]);
  });

  it("is collected through a merged registry too (dev serves ingest and delivery on one /metrics)", async () => {
    const { registry, tally } = tallied();
    tally.add("/v1/page", 503, "storage_unavailable");
    const merged = Registry.merge([registry, new Registry()]);
    expect(await merged.metrics()).toContain(`${NAME}{route="/v1/page",status="503",code="storage_unavailable"} 1`);
  });
});
