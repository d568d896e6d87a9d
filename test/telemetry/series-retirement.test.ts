// Metric series of a source or destination that left the config are dropped a while after
// (regression: a review's 15 minutes of churn left 18,000 delivery series and 1,252 ingest series
// naming deleted destinations and sources, until a restart). Here the wait is 400 ms, not 10 min.
import { describe, expect, it } from "vitest";
import type { Registry } from "prom-client";
import { basic, post } from "../harness/ingest.ts";
import { useDelivery } from "../harness/delivery.ts";

const RETIRE_AFTER_MS = 400;
const env = useDelivery({ retireAfterMs: RETIRE_AFTER_MS });

/** The values of `label` in the series of counter `name` (gauges are rebuilt at each scrape anyway). */
async function labelValues(registry: Registry, name: string, label: string): Promise<Set<string>> {
  const metric = await registry.getSingleMetric(name)!.get();
  return new Set(metric.values.map((v) => String(v.labels[label])));
}

describe("metric series of what left the config", () => {
  it("are dropped after the wait, and a name back before it keeps its series", async () => {
    for (const name of ["stays", "goes", "returns"]) {
      const key = env.addSource(name);
      await env.setDestination(`to-${name}`, { sources: [name], urls: [env.receiver.url(`/${name}`)] });
      const res = await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e" }, { headers: { authorization: basic(key) } });
      expect(res.status).toBe(200);
      await expect.poll(() => env.receiver.requests(`/${name}`).length).toBe(1);
    }
    const destinations = () => labelValues(env.metrics.registry, "trackhook_delivery_messages_total", "destination");
    const sources = () => labelValues(env.ingest.metrics.registry, "trackhook_ingest_messages_total", "source");
    await expect.poll(destinations).toEqual(new Set(["default/to-stays", "default/to-goes", "default/to-returns"]));
    expect(await sources()).toEqual(new Set(["default/stays", "default/goes", "default/returns"]));

    env.remove("WebhookDestination", "to-goes");
    env.remove("Source", "goes");
    await env.setDestination("to-returns", { sources: ["returns"], urls: [env.receiver.url("/returns")], enabled: false });
    // Still there within the wait: the last counts can be scraped.
    expect(await destinations()).toContain("default/to-goes");
    expect(await sources()).toContain("default/goes");
    await env.setDestination("to-returns", { sources: ["returns"], urls: [env.receiver.url("/returns")] });

    await new Promise((r) => setTimeout(r, RETIRE_AFTER_MS * 3));
    expect(await destinations()).toEqual(new Set(["default/to-stays", "default/to-returns"]));
    expect(await sources()).toEqual(new Set(["default/stays", "default/returns"]));
  });
});
