// Isolation test (issue 3): a destination whose receiver never answers within its timeout must not
// slow delivery to the others. One DeliveryService delivers two destinations on two sources; the
// healthy one's throughput (messages/s from its first to its last arrival) is measured alone (the
// dead destination disabled) and beside the dead one, which receives the same volume at the same
// time. Both conditions alternate, several rounds each, and the best run of each counts.
import { createServer, type Server, type ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CompiledConfig } from "../../schema/mod.ts";
import { compileConfig, staticConfig, ConfigHolder } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender } from "../../dataplane/delivery/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { EVENTS_STREAM, consumerName } from "../../dataplane/nats/mod.ts";
import { basic, startIngest, type IngestHarness } from "../harness/ingest.ts";
import { randomName, startNats, type NatsHarness } from "../harness/nats.ts";

/**
 * Messages per measured run, sent as /v1/batch requests of BATCH messages: enough for a run of over
 * a second, so it spans the dead destination's timeout (1 s) and the retry work that follows.
 */
const M = 10000;
const BATCH = 100;
/** Batch requests in flight at once, per source. */
const SEND_CONCURRENCY = 4;
const MIN_RATIO = 0.8;
/** Each condition is measured this often and the best run counts: noise on a 2-core machine only ever slows a run down. */
const ROUNDS = 5;

/**
 * A receiver lean enough not to be what is measured: answers 200 at once and notes when each
 * message of the current run arrives (by the x-delivery-id header, no body parsing).
 */
class HealthyReceiver {
  readonly server: Server;
  /** messageId prefix of the run being measured, and the arrival times of its messages. */
  run = "";
  arrivals = new Map<string, number>();
  total = 0;

  constructor() {
    this.server = createServer((req, res) => {
      req.on("data", () => {});
      req.on("end", () => {
        this.total++;
        const deliveryId = String(req.headers["x-delivery-id"] ?? "");
        const id = deliveryId.slice(deliveryId.lastIndexOf("/") + 1);
        if (this.run && id.startsWith(this.run) && !this.arrivals.has(id)) this.arrivals.set(id, performance.now());
        res.writeHead(200, { "content-length": "2" }).end("ok");
      });
    });
  }
}

/** Accepts every request and never answers: each attempt ends in the sender's timeout. */
class DeadReceiver {
  readonly server: Server;
  requests = 0;
  /** Requests the sender gave up on (its timeout closed the connection). */
  abandoned = 0;
  readonly #held = new Set<ServerResponse>();

  constructor() {
    this.server = createServer((req, res) => {
      this.requests++;
      req.resume();
      this.#held.add(res);
      res.on("close", () => {
        this.#held.delete(res);
        this.abandoned++;
      });
    });
  }
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`;
}

async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

const RUN = randomName("iso");
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let nats: NatsHarness;
let ingest: IngestHarness;
let service: DeliveryService;
let sender: WebhookSender;
const healthy = new HealthyReceiver();
const dead = new DeadReceiver();
const config = new ConfigHolder();
let withDead: CompiledConfig;
let healthyOnly: CompiledConfig;

function documents(healthyUrl: string, deadUrl: string) {
  const secret = { apiVersion: "v1", kind: "Secret", metadata: { name: "keys" }, stringData: { healthy: `key-healthy-${RUN}`, dead: `key-dead-${RUN}` } };
  const source = (name: string) => ({
    apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name }, spec: { writeKeySecretRef: { name: "keys", key: name } },
  });
  const destination = (name: string, url: string, timeout: string) => ({
    apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name }, spec: { sources: [name], urls: [url], timeout },
  });
  return {
    sources: [secret, source("healthy"), source("dead")],
    healthy: destination("healthy", healthyUrl, "5s"),
    // Its receiver holds every request: each attempt takes the whole (short) timeout, then is retried.
    dead: destination("dead", deadUrl, "1s"),
  };
}

const compile = (docs: unknown[]) => compileConfig(docs.map((body, i) => ({ origin: `test document ${i + 1}`, body: structuredClone(body) })));

beforeAll(async () => {
  const docs = documents(await listen(healthy.server), await listen(dead.server));
  healthyOnly = compile([...docs.sources, docs.healthy]);
  withDead = compile([...docs.sources, docs.healthy, docs.dead]);
  nats = await startNats();
  ingest = await startIngest(nats, { config: staticConfig(withDead) });
  sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "trackhook/test" });
  config.set(healthyOnly);
  service = await DeliveryService.start({
    nc: await nats.connect(), config, sender, log: createLogger({ level: "silent" }), metrics: new DeliveryMetrics({ defaultMetrics: false }),
  });
});

afterAll(async () => {
  // The dead receiver's held requests end with its connections, so stopping never waits on them.
  await close(dead.server);
  await service?.stop();
  await sender?.close();
  await close(healthy.server);
  await ingest?.close();
  await nats?.stop();
});

/** Sends `count` track messages of one source as /v1/batch requests, SEND_CONCURRENCY at a time. */
async function sendBatches(source: "healthy" | "dead", prefix: string, count: number): Promise<void> {
  const batches = Array.from({ length: Math.ceil(count / BATCH) }, (_, b) =>
    Array.from({ length: Math.min(BATCH, count - b * BATCH) }, (_, i) => ({
      type: "track", userId: `user-${b}`, event: "Isolation", messageId: `${prefix}-${b * BATCH + i}`, properties: { n: b * BATCH + i },
    })),
  );
  let next = 0;
  const client = async () => {
    while (next < batches.length) {
      const batch = batches[next++]!;
      const res = await fetch(`${ingest.url}/v1/batch`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: basic(`key-${source}-${RUN}`) },
        body: JSON.stringify({ batch }),
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`/v1/batch for ${source}: ${res.status} ${text}`);
    }
  };
  await Promise.all(Array.from({ length: SEND_CONCURRENCY }, client));
}

/** The dead destination's maxInFlight (the default): its consumer's max_ack_pending. */
const DEAD_WINDOW = 100;

/** Messages the dead destination holds: in delivery, or waiting for a retry (its consumer's ack pending). */
async function deadWindow(): Promise<number> {
  return (await nats.jsm.consumers.info(EVENTS_STREAM, consumerName("default", "dead"))).num_ack_pending;
}

async function waitForDestination(name: string, present: boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (service.destinations.includes(`default/${name}`) !== present) {
    if (Date.now() > deadline) throw new Error(`destination ${name} did not ${present ? "start" : "stop"}`);
    await sleep(20);
  }
}

/**
 * One measured run: M messages to the healthy source and, at the same time, M to the dead source;
 * the healthy destination's messages/s from first to last arrival. The dead source gets its
 * messages in both conditions, so the ingest (in this process too) does the same work in both and
 * the only difference is whether the dead destination is delivering them.
 */
async function measure(label: string, besideDead: boolean): Promise<number> {
  const prefix = `${RUN}-${label}`;
  healthy.run = prefix;
  healthy.arrivals = new Map();
  const deadBefore = { requests: dead.requests, abandoned: dead.abandoned };
  await Promise.all([sendBatches("healthy", prefix, M), sendBatches("dead", `${prefix}-dead`, M)]);
  const deadline = Date.now() + 30_000;
  while (healthy.arrivals.size < M) {
    if (Date.now() > deadline) throw new Error(`${label}: ${healthy.arrivals.size} of ${M} messages arrived within 30 s`);
    await sleep(10);
  }
  const times = [...healthy.arrivals.values()];
  const seconds = (Math.max(...times) - Math.min(...times)) / 1000;
  const rate = (M - 1) / seconds;
  console.log(
    `isolation ${label}: ${M} messages in ${(seconds * 1000).toFixed(0)} ms = ${rate.toFixed(0)} messages/s` +
      (besideDead
        ? ` (meanwhile the dead receiver got ${dead.requests - deadBefore.requests} new requests and saw ${dead.abandoned - deadBefore.abandoned} given up after the timeout)`
        : ""),
  );
  healthy.run = "";
  return rate;
}

describe("a dead destination beside a healthy one", () => {
  it(`leaves the healthy destination's throughput within ${Math.round((1 - MIN_RATIO) * 100)}% of its throughput alone`, { timeout: 90_000 }, async () => {
    await waitForDestination("healthy", true);
    // Warm-up: connections, JIT, the stream's first blocks.
    await measure("warmup", false);

    // Alternate the two conditions so slow drift (GC, the growing stream) hits both alike.
    const alone: number[] = [];
    const beside: number[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      config.set(healthyOnly);
      await waitForDestination("dead", false);
      alone.push(await measure(`alone-${round}`, false));

      config.set(withDead);
      await waitForDestination("dead", true);
      // Fill the dead destination's window first (its 100 slots: requests hanging, or messages
      // waiting for their retry), so every measured message competes with a destination at its
      // limit. Once its URL is paused, few requests go out: the window is what shows it at work.
      // Not a new request each round: the window may still be full of earlier rounds' messages
      // waiting out their retry backoff, and then none goes out for a while (CI, round 5: none in
      // 10 s, the window full all along).
      const before = dead.requests;
      await sendBatches("dead", `${RUN}-prime-${round}`, BATCH);
      const deadline = Date.now() + 10_000;
      while ((await deadWindow()) < DEAD_WINDOW) {
        if (Date.now() > deadline) throw new Error(`the dead destination did not fill its window (${await deadWindow()} of ${DEAD_WINDOW}, ${dead.requests - before} requests)`);
        await sleep(50);
      }
      beside.push(await measure(`beside-dead-${round}`, true));
    }

    // The mean of the rounds, not the best: on this shared VM single runs of one condition vary
    // threefold, and one lucky run decided a comparison of maxima (0.66 in one CI run, 1.05 in the
    // next). The rounds alternate, so drift hits both means alike.
    const mean = (runs: number[]) => runs.reduce((a, b) => a + b, 0) / runs.length;
    const meanAlone = mean(alone);
    const meanBeside = mean(beside);
    const ratio = meanBeside / meanAlone;
    console.log(
      `isolation: healthy destination alone ${meanAlone.toFixed(0)} messages/s on average (runs ${alone.map((r) => r.toFixed(0)).join(", ")}), ` +
        `beside a dead destination ${meanBeside.toFixed(0)} messages/s (runs ${beside.map((r) => r.toFixed(0)).join(", ")}); ` +
        `ratio ${ratio.toFixed(2)} (must be >= ${MIN_RATIO}); the dead receiver got ${dead.requests} requests, answered none, and saw ${dead.abandoned} given up`,
    );
    // The dead destination really was trying (and timing out) while the healthy one was measured.
    expect(dead.requests).toBeGreaterThanOrEqual(ROUNDS);
    expect(dead.abandoned).toBeGreaterThan(0);
    expect(ratio).toBeGreaterThanOrEqual(MIN_RATIO);
  });
});
