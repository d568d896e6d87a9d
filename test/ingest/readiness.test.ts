// /readyz follows JetStream: 503 while nats-server is down (so Kubernetes takes the pod out of the
// Service), 200 again once it is back; /healthz stays 200 throughout (no restart loop).
import { describe, expect, it } from "vitest";
import { buildIngestApp } from "../../dataplane/ingest/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { ensureStream, eventsStreamConfig } from "../../dataplane/nats/mod.ts";
import { DEFAULT_STREAM, TEST_CONFIG, WRITE_KEY, basic, configFromYaml, post, useIngest } from "../harness/ingest.ts";
import { startNats } from "../harness/nats.ts";

const env = useIngest();

async function until(path: string, status: number, timeoutMs = 10_000): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(`${env.ingest.url}${path}`);
    if (res.status === status) return (await res.json()) as Record<string, unknown>;
    if (Date.now() > deadline) throw new Error(`${path} did not answer ${status} within ${timeoutMs} ms (last ${res.status})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("readiness", () => {
  it("is ready while JetStream answers", async () => {
    expect(await until("/readyz", 200)).toEqual({ status: "ready" });
  });

  const metrics = async () => (await (await fetch(`${env.ingest.url}/metrics`)).text()).split("\n").filter((l) => /^trackhook_(nats_connected|events_stream)/.test(l));

  it("is not ready while nats-server is down, and live all along; its metrics say NATS is unreachable, not that the stream is empty (found by a review)", async () => {
    expect((await metrics()).sort()).toEqual([
      expect.stringMatching(/^trackhook_events_stream_bytes\{stream="TRACKHOOK_EVENTS"\} \d+$/),
      expect.stringMatching(/^trackhook_events_stream_max_bytes\{stream="TRACKHOOK_EVENTS"\} \d+$/),
      "trackhook_nats_connected 1",
    ]);
    await env.nats.server.kill("SIGKILL");
    const body = await until("/readyz", 503);
    expect(body).toMatchObject({ status: "not_ready", reason: expect.stringMatching(/NATS disconnected|TRACKHOOK_EVENTS/) });
    expect((await fetch(`${env.ingest.url}/healthz`)).status).toBe(200);
    const started = Date.now();
    expect(await metrics()).toEqual(["trackhook_nats_connected 0"]);
    expect(Date.now() - started, "a scrape does not wait for JetStream's timeout").toBeLessThan(500);
  });

  it("is ready again once nats-server is back", async () => {
    await env.nats.server.restart();
    expect(await until("/readyz", 200)).toEqual({ status: "ready" });
    await expect.poll(metrics).toContain("trackhook_nats_connected 1");
  });
});

describe("the log while JetStream cannot store", () => {
  it("has one line for many failed requests, with the cause and no stack (regression: a line and a stack per request)", async () => {
    const nats = await startNats();
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger({ level: "info", destination: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) } });
    await ensureStream(nats.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const app = await buildIngestApp({ nc: await nats.connect(), config: configFromYaml(TEST_CONFIG), logger }, { publishTimeoutMs: 300 });
    const url = await app.listen({ host: "127.0.0.1", port: 0 });
    try {
      await nats.server.kill("SIGKILL");
      const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) =>
        post(`${url}/v1/track`, { userId: "u", event: "e", messageId: `down-${i}` }, { headers: { authorization: basic(WRITE_KEY) } }).then((r) => r.status)));
      expect(statuses).toEqual(Array(20).fill(503));
      const storage = lines.filter((l) => l.code === "storage_unavailable");
      expect(storage).toHaveLength(1);
      expect(storage[0]).toMatchObject({ level: 50, msg: "Messages could not be stored; retry later", cause: expect.any(String), moreFailedSinceLastLine: 0 });
      expect(storage[0]).not.toHaveProperty("err");
    } finally {
      await app.close();
      await nats.stop();
    }
  });
});
