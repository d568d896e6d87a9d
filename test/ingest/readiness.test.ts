// /readyz follows JetStream: 503 while nats-server is down (so Kubernetes takes the pod out of the
// Service), 200 again once it is back; /healthz stays 200 throughout (no restart loop).
import { request as httpRequest } from "node:http";
import { describe, expect, it } from "vitest";
import { buildIngestApp } from "../../dataplane/ingest/mod.ts";
import { createLogger, type Logger } from "../../dataplane/logging.ts";
import { EVENTS_STREAM, ensureStream, eventsStreamConfig } from "../../dataplane/nats/mod.ts";
import { jetstreamManager } from "@nats-io/jetstream";
import { freeze, thaw } from "../harness/freeze.ts";
import { DEFAULT_STREAM, TEST_CONFIG, WRITE_KEY, basic, configFromYaml, post, storedMessages, useIngest } from "../harness/ingest.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";

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

/**
 * An ingest on a nats-server of its own, for a test that kills or freezes that server; both are
 * stopped after `run`.
 */
async function withOwnIngest(options: { publishTimeoutMs: number; bodyBytesInFlight?: number; logger?: Logger }, run: (own: { nats: NatsHarness; url: string; close: () => Promise<void> }) => Promise<void>): Promise<void> {
  const nats = await startNats();
  await ensureStream(nats.jsm, eventsStreamConfig(DEFAULT_STREAM));
  const { logger, ...ingestOptions } = options;
  const app = await buildIngestApp({ nc: await nats.connect(), config: configFromYaml(TEST_CONFIG), ...(logger ? { logger } : {}) }, ingestOptions);
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  try {
    await run({ nats, url, close: () => app.close() });
  } finally {
    await app.close();
    await nats.stop();
  }
}

/** Kills the server, and waits until the ingest has seen its connection go (not ready). */
async function killNats(nats: NatsHarness, url: string): Promise<void> {
  await nats.server.kill("SIGKILL");
  await expect.poll(async () => (await fetch(`${url}/readyz`)).status, { timeout: 10_000 }).toBe(503);
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

  it("holds a request while NATS is away for at most the publish timeout less a second, then answers 503 with Retry-After (found by a review of SDKs through faults: answered at once, Go's, analytics.js's and the classic SDK's tries were spent within seconds)", async () => {
    await new Promise((r) => setTimeout(r, 2_500)); // away for longer than a NATS pod's restart
    const started = Date.now();
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "While away" }, { headers: { authorization: basic(WRITE_KEY) } });
    const tookMs = Date.now() - started;
    expect(res.status).toBe(503);
    expect(res.json).toMatchObject({ success: false, code: "storage_unavailable" });
    expect(res.headers.get("retry-after")).toMatch(/^\d+$/);
    // The default publish timeout is 5 s: held 4 s, under every SDK's own timeout (Analytics.NET's 5 s is the shortest).
    expect(tookMs).toBeGreaterThanOrEqual(3_900);
    expect(tookMs).toBeLessThan(4_900);
  });

  it("stores a request held while NATS is away once it is back, and answers 200", async () => {
    const messageId = `held-${Date.now()}`;
    const answer = post(`${env.ingest.url}/v1/track`, { userId: "u", event: "Held", messageId }, { headers: { authorization: basic(WRITE_KEY) } });
    await new Promise((r) => setTimeout(r, 500));
    await env.nats.server.restart();
    expect((await answer).status).toBe(200);
    // The test's own connection may not be back yet: a read then waits out its timeout (found by a review).
    await expect.poll(async () => (await storedMessages(env.nats).catch(() => [])).map((m) => m.body.messageId), { timeout: 15_000 }).toContain(messageId);
  });

  it("is ready again once nats-server is back", async () => {
    expect(await until("/readyz", 200)).toEqual({ status: "ready" });
    await expect.poll(metrics).toContain("trackhook_nats_connected 1");
  });
});

describe("requests held while NATS is away", () => {
  it("hold at most 16 MiB of messages: beyond it, they are answered 503 at once", async () => {
    // The batch body budget (8 MiB by default) would answer most of them first.
    await withOwnIngest({ publishTimeoutMs: 4_000, bodyBytesInFlight: 64 * 1024 * 1024 }, async ({ nats, url }) => {
      await killNats(nats, url);
      // 40 batches of 20 items of 24 KB: 19.2 MB in all, some 34 of them fit in 16 MiB.
      const batch = () => ({ batch: Array.from({ length: 20 }, (_, i) => ({ type: "track", userId: "u", event: "Big", messageId: `big-${Math.random()}-${i}`, properties: { pad: "x".repeat(24_000) } })) });
      const started = Date.now();
      const answers = await Promise.all(Array.from({ length: 40 }, () => post(`${url}/v1/batch`, batch(), { headers: { authorization: basic(WRITE_KEY) } }).then((r) => ({ status: r.status, ms: Date.now() - started }))));
      expect(answers.every((a) => a.status === 503)).toBe(true);
      const atOnce = answers.filter((a) => a.ms < 2_000).length;
      expect(atOnce).toBeGreaterThanOrEqual(3);
      expect(atOnce).toBeLessThanOrEqual(12);
    });
  });

  it("are tried again while JetStream does not answer yet after the reconnect, within their wait (found by a review: 503 at once with time left)", async () => {
    await withOwnIngest({ publishTimeoutMs: 5_000 }, async ({ nats, url }) => {
      // No stream after the restart: the reconnected publishes get "no responders" until it is made.
      await nats.jsm.streams.delete(EVENTS_STREAM);
      await killNats(nats, url);
      const messageId = `after-restart-${Date.now()}`;
      const answer = post(`${url}/v1/track`, { userId: "u", event: "Held", messageId }, { headers: { authorization: basic(WRITE_KEY) } });
      await new Promise((r) => setTimeout(r, 300));
      await nats.server.restart();
      await new Promise((r) => setTimeout(r, 1_000));
      const own = await nats.connect();
      try {
        await ensureStream(await jetstreamManager(own), eventsStreamConfig(DEFAULT_STREAM));
        expect((await answer).status).toBe(200);
        const info = await (await jetstreamManager(own)).streams.info(EVENTS_STREAM);
        expect(info.state.messages).toBe(1);
      } finally {
        await own.close();
      }
    });
  });

  it("are answered 503 at once at shutdown, not at the end of their wait", async () => {
    await withOwnIngest({ publishTimeoutMs: 20_000 }, async ({ nats, url, close }) => {
      await killNats(nats, url);
      const started = Date.now();
      const answer = post(`${url}/v1/track`, { userId: "u", event: "At shutdown" }, { headers: { authorization: basic(WRITE_KEY) } });
      await new Promise((r) => setTimeout(r, 500));
      const closed = close();
      expect((await answer).status).toBe(503);
      expect(Date.now() - started).toBeLessThan(5_000); // not the 19 s wait
      await closed;
    });
  });
});

describe("the log while JetStream cannot store", () => {
  it("has one line for many failed requests, with the cause and no stack (regression: a line and a stack per request)", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger({ level: "info", destination: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) } });
    await withOwnIngest({ publishTimeoutMs: 300, logger }, async ({ nats, url }) => {
      await nats.server.kill("SIGKILL");
      const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) =>
        post(`${url}/v1/track`, { userId: "u", event: "e", messageId: `down-${i}` }, { headers: { authorization: basic(WRITE_KEY) } }).then((r) => r.status)));
      expect(statuses).toEqual(Array(20).fill(503));
      const storage = lines.filter((l) => l.code === "storage_unavailable");
      expect(storage).toHaveLength(1);
      expect(storage[0]).toMatchObject({ level: 50, msg: "Messages could not be stored; retry later", cause: expect.any(String), moreFailedSinceLastLine: 0 });
      expect(storage[0]).not.toHaveProperty("err");
    });
  });
});

describe("a client that gives up while its messages are being stored", () => {
  it("is counted as 499 client_aborted (found by an alerts review: a request abandoned after its body was read was counted nowhere)", async () => {
    // The publish times out (and the 503 is written to a closed socket) well after the client has
    // left, however busy the machine: with 1 s, a test run with every core taken once saw the
    // timeout fire before the ingest had read the client's close, and counted a 503.
    await withOwnIngest({ publishTimeoutMs: 4_000 }, async ({ nats, url }) => {
      const counted = async () => (await (await fetch(`${url}/metrics`)).text()).split("\n").filter((l) => l.startsWith('trackhook_ingest_requests_total{route="/v1/track"'));
      await freeze(nats.server.pid!); // the PubAck never comes; the client does not know yet
      try {
        // The client leaves 300 ms after its whole request is on the wire (not 300 ms after it was
        // begun, which on a busy machine could be before anything was sent).
        const answered = await new Promise<number | "left">((resolve, reject) => {
          const body = JSON.stringify({ userId: "u", event: "Abandoned" });
          const req = httpRequest(`${url}/v1/track`, { method: "POST", headers: { "content-type": "application/json", authorization: basic(WRITE_KEY), "content-length": Buffer.byteLength(body) } }, (res) => resolve(res.statusCode!));
          req.on("finish", () => setTimeout(() => { req.destroy(); resolve("left"); }, 300));
          req.on("error", (err) => (req.destroyed ? undefined : reject(err)));
          req.end(body);
        });
        expect(answered).toBe("left");
        await expect.poll(counted, { timeout: 10_000, interval: 200 }).toEqual(['trackhook_ingest_requests_total{route="/v1/track",status="499",code="client_aborted"} 1']);
        await new Promise((r) => setTimeout(r, 1_000));
        expect(await counted()).toEqual(['trackhook_ingest_requests_total{route="/v1/track",status="499",code="client_aborted"} 1']); // once
      } finally {
        thaw(nats.server.pid!);
      }
    });
  });
});
