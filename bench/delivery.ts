// Delivery benchmark (not a test): prints a report, writes bench/results/delivery-latest.json, exits 0.
//
//   npm run bench:delivery                     # or: node bench/delivery.ts [options]
//   node bench/delivery.ts --cpu-prof          # also profiles the deliver process: top frames per phase
//   node bench/delivery.ts --concurrency 256   # the destination's maxInFlight, and the ceiling's connections
//   node bench/delivery.ts --deliver-node-options="--max-semi-space-size=32"   # try V8 flags on deliver
//   node bench/delivery.ts --cli /tmp/other-build/dist/cli/main.js            # compare another build
//
// Needs a build (`npm run build`: ingest and deliver run as `node dist/cli/main.js ...` with the
// node flags of its shebang) and nats-server (.tools/bin or PATH). Everything listens on
// 127.0.0.1; the webhook receiver is bench/receiver.ts, a bare node:http server in its own process
// that answers 200 at once and notes each arrival. In one run it measures:
//   C  ceiling: bare undici POSTs (a keep-alive Pool, `concurrency` connections) of the bodies and
//      headers delivery sends, to the receiver, closed loop at `concurrency` in flight
//   S  diagnostic: trackhook's WebhookSender alone (same requests, this process, no NATS)
//   1  delivery throughput: `trackhook deliver` (maxInFlight = concurrency) drains a backlog of
//      `backlog` messages published straight to TRACKHOOK_EVENTS while it was paused (SIGSTOP);
//      messages/s = first-to-last arrival at the receiver, which must see each message once.
//      C and the drain are each measured `rounds` times, alternating, and compared in sum
//   2  end-to-end latency: `trackhook ingest` takes single /v1/track requests open loop at `rate`/s;
//      latency = the receiver's arrival time minus the moment the bench got the ingest's 200
//   3  peak RSS of the deliver process (VmHWM, and the max of sampled VmRSS)
// CPU use of every process is sampled per phase from /proc, to show who is the bottleneck. On a
// small machine the receiver, deliver and nats-server share the cores: read the "other" column
// (anything else running on the machine) before trusting a run.
import { type ChildProcess } from "node:child_process";
import { existsSync, statSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { Pool } from "undici";
import { xSignature, webhookBody, type DeliverableMessage } from "../dataplane/delivery/payload.ts";
import { WebhookSender } from "../dataplane/delivery/sender.ts";
import { enrich } from "../dataplane/ingest/enrich.ts";
import { ATTEMPTS_STREAM, DLQ_STREAM, EVENTS_STREAM, consumerName, eventMsgId, eventSubject } from "../dataplane/nats/mod.ts";
import { VERSION } from "../dataplane/version.ts";
import {
  ROOT, cpuText, openLoop, keepProfile, writeResults, fmt, gitCommit, log, monotonicUs, percentiles, printProfile, printTable, procStatusKB, round,
  runBench, shippedNodeFlags, sleep, spawnUntil, startNats, stopChild, tempDir, usPer, verdict, waitForQuiet,
  sharedClockMs, withCpu, type PhaseWindow, type Pids, scrape, bucketQuantile, LOOP_RESOLUTION_MS, type Samples, nextMessageId, trackEvent, natsConnect, streamCount, positiveFlag,
} from "./lib.ts";

const RECEIVER = join(ROOT, "bench", "receiver.ts");

const { values: flags } = parseArgs({
  options: {
    backlog: { type: "string", default: "20000" },
    warmup: { type: "string", default: "20000" },
    concurrency: { type: "string", default: "100" },
    rate: { type: "string", default: "500" },
    "latency-s": { type: "string", default: "10" },
    rounds: { type: "string", default: "3" },
    "publish-live": { type: "boolean", default: false },
    "cpu-prof": { type: "boolean", default: false },
    "deliver-node-options": { type: "string", default: "" },
    cli: { type: "string", default: "" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (flags.help) {
  process.stdout.write(`Usage: node bench/delivery.ts [--backlog 20000] [--warmup 20000] [--concurrency 100] [--rate 500] [--latency-s 10] [--rounds 3]
       [--rounds N]            measure C and the backlog drain N times each, alternating (C D, D C, C D, ...)
       [--publish-live]        publish the backlog while deliver runs (default: deliver is paused with SIGSTOP meanwhile)
       [--cpu-prof]            profile the deliver process (bench/results/delivery-latest.cpuprofile, top frames per phase)
       [--deliver-node-options="--max-old-space-size=128"]   (extra node flags for the deliver process)
       [--cli <path to cli/main.js>]                         (another build; default dist/cli/main.js)\n`);
  process.exit(0);
}
const num = (name: keyof typeof flags) => positiveFlag(flags, name);
const P = {
  backlog: Math.floor(num("backlog")),
  warmup: Math.floor(num("warmup")),
  concurrency: Math.floor(num("concurrency")),
  rate: num("rate"),
  latencyMs: num("latency-s") * 1000,
  rounds: Math.max(1, Math.floor(num("rounds"))),
  publishLive: flags["publish-live"] === true,
  cpuProf: flags["cpu-prof"] === true,
  cli: flags.cli || join(ROOT, "dist", "cli", "main.js"),
  deliverNodeOptions: (flags["deliver-node-options"] ?? "").split(/\s+/).filter(Boolean),
};

const TARGETS = { ratio: 0.7, p99Ms: 100 };
/** Before starting, wait up to QUIET_WAIT_S seconds for the machine to be under QUIET_BUSY_PCT CPU. */
const QUIET_WAIT_S = 30;
const QUIET_BUSY_PCT = 20;
/** ... and again, shorter, before the delivery phase. */
const QUIET_PHASE_WAIT_S = 15;
/** A phase waiting for arrivals gives up after this long without one, or this long in all. */
const STALL_MS = 10_000;
const DRAIN_LIMIT_MS = 60_000;

// ---------------------------------------------------------------------------------------------
// Messages: the ~300-byte track events of bench/ingest.ts, stored as the ingest stores them.

const NAMESPACE = "default";
const SOURCE = "website";
const DESTINATION = "bench";
const WRITE_KEY = "bench-write-key";
const SHARED_SECRET = "bench-signing-secret";
const AUTH = `Basic ${Buffer.from(`${WRITE_KEY}:`).toString("base64")}`;
const SUBJECT = eventSubject(NAMESPACE, SOURCE, "track");
/** The message as the ingest stores it in TRACKHOOK_EVENTS (enriched: receivedAt, timestamps, ...). */
function storedMessage(messageId: string): string {
  return JSON.stringify(enrich(JSON.parse(trackEvent(messageId)) as Record<string, unknown>, "track", { receivedAt: new Date(), ip: () => "127.0.0.1" }));
}

const deliveryId = (messageId: string) => `${NAMESPACE}/${DESTINATION}/${messageId}`;

/** What `trackhook deliver` POSTs for a stored message: the same body bytes and headers. */
function webhookRequest(stored: string): { body: Buffer; headers: Record<string, string> } {
  const message = JSON.parse(stored) as DeliverableMessage;
  const body = webhookBody(message);
  return {
    body,
    headers: {
      "user-agent": `trackhook/${VERSION}`,
      "x-delivery-id": deliveryId(message.messageId),
      "x-signature": xSignature(body, SHARED_SECRET),
      "content-type": "application/json",
    },
  };
}

const EVENT_BYTES = Buffer.byteLength(trackEvent("bench-xxxxxx-00000000"));
const STORED_BYTES = Buffer.byteLength(storedMessage("bench-xxxxxx-00000000"));
const BODY_BYTES = webhookRequest(storedMessage("bench-xxxxxx-00000000")).body.length;

function configYaml(receiverUrl: string): string {
  return `apiVersion: v1
kind: Secret
metadata: { name: bench-keys }
stringData: { writeKey: ${WRITE_KEY}, signing: ${SHARED_SECRET} }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: ${SOURCE} }
spec:
  writeKeySecretRef: { name: bench-keys, key: writeKey }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: ${DESTINATION} }
spec:
  sources: [${SOURCE}]
  urls: ["${receiverUrl}"]
  sharedSecretRef: { name: bench-keys, key: signing }
  maxInFlight: ${P.concurrency}
`;
}

// ---------------------------------------------------------------------------------------------
// The receiver child (bench/receiver.ts), queried over IPC.

interface ReceiverStats {
  count: number;
  distinct: number;
  /** First and last arrival, ms on the machine's monotonic clock (sharedClockMs); null when nothing arrived. */
  first: number | null;
  last: number | null;
  unlabelled: number;
  arrivals?: Array<[string, number]>;
}

class ReceiverClient {
  readonly child: ChildProcess;
  readonly url: string;
  #next = 0;
  readonly #pending = new Map<number, (reply: Record<string, unknown>) => void>();

  constructor(child: ChildProcess, url: string) {
    this.child = child;
    this.url = url;
    child.on("message", (reply: Record<string, unknown> & { id: number }) => {
      this.#pending.get(reply.id)?.(reply);
      this.#pending.delete(reply.id);
    });
  }

  #query<T>(cmd: string, extra: Record<string, unknown> = {}): Promise<T> {
    const id = this.#next++;
    return new Promise<T>((resolve) => {
      this.#pending.set(id, (reply) => resolve(reply as T));
      this.child.send({ id, cmd, ...extra });
    });
  }

  reset(): Promise<unknown> {
    return this.#query("reset");
  }

  async count(): Promise<number> {
    return (await this.#query<{ count: number }>("count")).count;
  }

  stats(arrivals = false): Promise<ReceiverStats> {
    return this.#query<ReceiverStats>("stats", { arrivals });
  }

  /** Waits until `target` requests arrived, or STALL_MS passed without one, or DRAIN_LIMIT_MS in all. */
  async waitFor(target: number): Promise<{ count: number; complete: boolean }> {
    const start = performance.now();
    let last = -1;
    let lastChange = start;
    for (;;) {
      const count = await this.count();
      const now = performance.now();
      if (count >= target) return { count, complete: true };
      if (count !== last) {
        last = count;
        lastChange = now;
      }
      if (now - lastChange > STALL_MS || now - start > DRAIN_LIMIT_MS) return { count, complete: false };
      await sleep(20);
    }
  }
}

/** Messages per second from first to last arrival (the first one opens the interval). */
const arrivalSeconds = (s: ReceiverStats) => (s.first !== null && s.last !== null ? (s.last - s.first) / 1000 : NaN);
const arrivalRate = (s: ReceiverStats) => (s.count > 1 ? (s.count - 1) / arrivalSeconds(s) : NaN);

// ---------------------------------------------------------------------------------------------
// Phases.

interface CeilingResult {
  sent: number;
  ok: number;
  failures: number;
  firstError?: string;
  /** From the bench's first send to its last answer. */
  clientPerSecond: number;
}

/** Bare undici: `concurrency` requests in flight over as many keep-alive connections. */
async function ceiling(receiver: ReceiverClient, requests: Array<{ body: Buffer; headers: Record<string, string> }>): Promise<CeilingResult> {
  const origin = new URL(receiver.url);
  const pool = new Pool(origin.origin, { connections: P.concurrency, pipelining: 1, keepAliveTimeout: 60_000 });
  const r: CeilingResult = { sent: 0, ok: 0, failures: 0, clientPerSecond: 0 };
  let next = 0;
  const start = performance.now();
  const worker = async () => {
    while (next < requests.length) {
      const { body, headers } = requests[next++]!;
      r.sent++;
      try {
        const res = await pool.request({ method: "POST", path: origin.pathname, headers, body });
        await res.body.dump();
        if (res.statusCode === 200) r.ok++;
        else r.firstError ??= `status ${res.statusCode}`;
      } catch (err) {
        r.failures++;
        r.firstError ??= (err as Error).message;
      }
    }
  };
  await Promise.all(Array.from({ length: P.concurrency }, worker));
  r.clientPerSecond = (r.sent / (performance.now() - start)) * 1000;
  await pool.close();
  return r;
}

/**
 * trackhook's own HTTP client (WebhookSender, as deliver uses it) in this process, without NATS:
 * what the sender costs beyond bare undici, apart from the rest of delivery.
 */
async function senderAlone(receiver: ReceiverClient, requests: Array<{ body: Buffer; headers: Record<string, string> }>): Promise<{ sent: number; delivered: number; firstOutcome?: string }> {
  const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: `trackhook/${VERSION}` });
  let next = 0;
  let delivered = 0;
  let firstOutcome: string | undefined;
  const worker = async () => {
    while (next < requests.length) {
      const { body, headers } = requests[next++]!;
      const r = await sender.send({ pool: "bench", url: receiver.url, body, headers, timeoutMs: 5000 });
      if (r.outcome.kind === "delivered") delivered++;
      else firstOutcome ??= JSON.stringify(r.outcome);
    }
  };
  await Promise.all(Array.from({ length: P.concurrency }, worker));
  await sender.close();
  return { sent: requests.length, delivered, ...(firstOutcome ? { firstOutcome } : {}) };
}

/** Publishes pre-built stored messages straight to JetStream, a window of 256 in flight. */
async function publishAll(js: JetStreamClient, messages: Array<{ messageId: string; data: string }>): Promise<{ published: number; failures: number; perSecond: number; firstError?: string }> {
  let next = 0;
  let published = 0;
  let failures = 0;
  let firstError: string | undefined;
  const start = performance.now();
  const slot = async () => {
    while (next < messages.length) {
      const m = messages[next++]!;
      try {
        await js.publish(SUBJECT, m.data, { msgID: eventMsgId(NAMESPACE, SOURCE, m.messageId), expect: { streamName: EVENTS_STREAM }, timeout: 10_000 });
        published++;
      } catch (err) {
        failures++;
        firstError ??= (err as Error).message;
      }
    }
  };
  await Promise.all(Array.from({ length: 256 }, slot));
  return { published, failures, perSecond: (published / (performance.now() - start)) * 1000, ...(firstError ? { firstError } : {}) };
}

function backlogMessages(n: number): Array<{ messageId: string; data: string }> {
  return Array.from({ length: n }, () => {
    const messageId = nextMessageId();
    return { messageId, data: storedMessage(messageId) };
  });
}

interface LatencyRun {
  targetRate: number;
  achievedRate: number;
  sent: number;
  ok: number;
  statuses: Record<string, number>;
  /** messageId -> wall-clock ms at which the request was sent and the ingest's 200 arrived. */
  okAt: Map<string, { sent: number; at: number }>;
  /** The ingest's answer time, from send. */
  ingest: ReturnType<typeof percentiles>;
  benchLoopDelay: { p99: number; max: number };
}

/** /v1/track at P.rate (bench/lib.ts openLoop), noting when each 200 came back. */
async function trackOpenLoop(ingestUrl: string): Promise<LatencyRun> {
  const pool = new Pool(ingestUrl, { connections: 64, pipelining: 1, keepAliveTimeout: 60_000 });
  const headers = { "content-type": "application/json", authorization: AUTH };
  const okAt = new Map<string, { sent: number; at: number }>();
  const answerMs: number[] = [];
  const statuses: Record<string, number> = {};
  const run = await openLoop(P.rate, P.latencyMs, () => {
    const messageId = nextMessageId();
    const body = trackEvent(messageId);
    const sent = performance.now();
    const sentShared = sharedClockMs();
    return pool
      .request({ method: "POST", path: "/v1/track", headers, body })
      .then(async (res) => {
        const at = sharedClockMs();
        if (res.statusCode === 200) okAt.set(messageId, { sent: sentShared, at });
        answerMs.push(performance.now() - sent);
        await res.body.dump();
        return String(res.statusCode);
      })
      .catch(() => "error")
      .then((status) => {
        statuses[status] = (statuses[status] ?? 0) + 1;
      });
  });
  await pool.close();
  return {
    targetRate: P.rate,
    achievedRate: run.achievedRate,
    sent: run.sent,
    ok: okAt.size,
    statuses,
    okAt,
    ingest: percentiles(answerMs),
    benchLoopDelay: run.benchLoopDelay,
  };
}

/** The destination's consumer: waits (bounded) until nothing is pending or unacknowledged. */
async function consumerSettled(jsm: JetStreamManager, timeoutMs = 10_000): Promise<{ pending: number; ackPending: number; redelivered: number }> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const info = await jsm.consumers.info(EVENTS_STREAM, consumerName(NAMESPACE, DESTINATION));
    const r = { pending: info.num_pending, ackPending: info.num_ack_pending, redelivered: info.num_redelivered };
    if ((r.pending === 0 && r.ackPending === 0) || performance.now() > deadline) return r;
    await sleep(50);
  }
}

// ---------------------------------------------------------------------------------------------
// deliver's own /metrics, scraped around a phase: HTTP attempt time, GC, heap, event-loop delay.

interface DeliverDiagnostics {
  /** HTTP attempts over the phase (trackhook_delivery_attempt_duration_seconds), ms. */
  attempts: number;
  attemptMeanMs: number;
  attemptP50Ms: number;
  attemptP99Ms: number;
  /** Event-loop delay beyond prom-client's 10 ms sampling interval (reset at each scrape), ms. */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  /** Time in GC over the phase, ms; heap at its end, MB. */
  gcMs: number;
  heapUsedMB: number;
  heapTotalMB: number;
}

const ATTEMPT = "trackhook_delivery_attempt_duration_seconds";

function diagnostics(before: Samples, after: Samples): DeliverDiagnostics {
  const sum = (m: Samples, prefix: string) => [...m].filter(([k]) => k.startsWith(prefix)).reduce((a, [, v]) => a + v, 0);
  const delta = (prefix: string) => sum(after, prefix) - sum(before, prefix);
  const loop = (stat: string) => round(Math.max(0, (after.get(`nodejs_eventloop_lag_${stat}_seconds`) ?? NaN) * 1000 - LOOP_RESOLUTION_MS), 1);
  const attempts = delta(`${ATTEMPT}_count`);
  return {
    attempts,
    attemptMeanMs: round((delta(`${ATTEMPT}_sum`) / Math.max(1, attempts)) * 1000, 2),
    attemptP50Ms: bucketQuantile(ATTEMPT, before, after, 0.5),
    attemptP99Ms: bucketQuantile(ATTEMPT, before, after, 0.99),
    loopDelayP99Ms: loop("p99"),
    loopDelayMaxMs: loop("max"),
    gcMs: round(delta("nodejs_gc_duration_seconds_sum") * 1000, 0),
    heapUsedMB: round((after.get("nodejs_heap_size_used_bytes") ?? NaN) / 2 ** 20, 1),
    heapTotalMB: round((after.get("nodejs_heap_size_total_bytes") ?? NaN) / 2 ** 20, 1),
  };
}

const diagText = (d: DeliverDiagnostics) =>
  `${fmt(d.attempts)} HTTP attempts, mean ${d.attemptMeanMs} ms (p50 <= ${d.attemptP50Ms} ms, p99 <= ${d.attemptP99Ms} ms); ` +
  `event-loop delay p99 ${d.loopDelayP99Ms} ms, max ${d.loopDelayMaxMs} ms;\n            GC ${d.gcMs} ms; heap used/total at end ${d.heapUsedMB}/${d.heapTotalMB} MB`;

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  if (!existsSync(P.cli)) throw new Error(`${P.cli} not found: run \`npm run build\` first`);
  log(`trackhook delivery bench: ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}`);
  log(`  track event ${EVENT_BYTES} bytes, stored ${STORED_BYTES} bytes, webhook body ${BODY_BYTES} bytes (signed)`);
  log(`  concurrency (maxInFlight, ceiling connections) ${P.concurrency}; backlog ${fmt(P.backlog)} after ${fmt(P.warmup)} warm-up; latency at ${P.rate}/s for ${P.latencyMs / 1000}s`);
  const quiet = await waitForQuiet(QUIET_WAIT_S, QUIET_BUSY_PCT);
  log(
    `  ${P.cli.startsWith(ROOT) ? P.cli.slice(ROOT.length) : P.cli} built ${statSync(P.cli).mtime.toISOString()}` +
      `${P.cpuProf ? "; deliver runs with --cpu-prof (figures include profiler overhead)" : ""}` +
      `${P.deliverNodeOptions.length ? `; deliver node flags: ${P.deliverNodeOptions.join(" ")}` : ""}`,
  );

  const receiverSpawn = await spawnUntil(process.execPath, [RECEIVER, "0"], /^listening (http:\/\/\S+)/, { ipc: true });
  const receiver = new ReceiverClient(receiverSpawn.child, `${receiverSpawn.match[1]!}/hook`);
  log(`    receiver ${receiver.url} (pid ${receiverSpawn.child.pid})`);

  // C is measured in rounds alternating with delivery (below). The receiver, bare undici and the
  // sender are warmed up here: the receiver alone takes tens of thousands of requests to reach its
  // speed (a first C of 3,000 warm-up requests measured ~30k/s; later ones ~50k/s).
  const ceilingWarm = backlogMessages(P.warmup).map((m) => webhookRequest(m.data));
  await ceiling(receiver, ceilingWarm);
  await ceiling(receiver, ceilingWarm);

  log(`\n[S] trackhook's WebhookSender alone, same requests (${P.concurrency} in flight, no NATS) ...`);
  const senderRequests = backlogMessages(P.backlog).map((m) => webhookRequest(m.data));
  await senderAlone(receiver, ceilingWarm);
  await receiver.reset();
  const snd = await withCpu({ receiver: receiverSpawn.child.pid }, () => senderAlone(receiver, senderRequests));
  const senderRate = arrivalRate(await receiver.stats());
  const senderUs = usPer(snd.cpu.bench, snd.seconds, snd.result.sent);
  log(`    ${fmt(senderRate)} requests/s at the receiver; ${fmt(snd.result.delivered)} of ${fmt(snd.result.sent)} delivered${snd.result.firstOutcome ? ` (first other outcome ${snd.result.firstOutcome})` : ""}`);
  log(`    CPU ${cpuText(snd.cpu)}; sender ${senderUs} us CPU per request`);

  // nats-server, ingest (creates the stream) and deliver, all with one config.
  const nats = await startNats("trackhook-bench-store-");
  const configDir = tempDir("trackhook-bench-config-");
  writeFileSync(join(configDir, "bench.yaml"), configYaml(receiver.url));
  const profDir = P.cpuProf ? tempDir("trackhook-bench-prof-") : undefined;
  const shipped = shippedNodeFlags(P.cli);
  const ingestSpawn = await spawnUntil(
    process.execPath,
    [...shipped, P.cli, "ingest", "--config", configDir, "--nats", nats.url, "--host", "127.0.0.1", "--port", "0", "--log-level", "info"],
    /"address":"(http:\/\/[^"]+)".*"msg":"ingest listening"|"msg":"ingest listening".*"address":"(http:\/\/[^"]+)"/,
  );
  const ingest = ingestSpawn.child;
  const ingestUrl = ingestSpawn.match[1] ?? ingestSpawn.match[2]!;
  const deliverFlags = [...shipped, ...P.deliverNodeOptions, ...(profDir ? ["--cpu-prof", "--cpu-prof-dir", profDir] : [])];
  const deliverSpawn = await spawnUntil(
    process.execPath,
    [...deliverFlags, P.cli, "deliver", "--config", configDir, "--nats", nats.url, "--allow-private-networks", "--host", "127.0.0.1", "--port", "0", "--log-level", "info"],
    /"address":"(http:\/\/[^"]+)".*"msg":"delivery running|"msg":"delivery running.*"address":"(http:\/\/[^"]+)"/,
  );
  const deliver = deliverSpawn.child;
  const deliverOps = deliverSpawn.match[1] ?? deliverSpawn.match[2]!;
  let stopping = false;
  deliver.once("exit", (code, signal) => {
    if (!stopping) log(`\n  !! deliver exited in the middle of the run (code ${code}, signal ${signal}); its last lines:\n${deliverSpawn.tail.map((l) => `    ${l}`).join("\n")}\n`);
  });
  const nc = await natsConnect(nats.url);
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  // The consumer delivers what arrives after it exists (DeliverPolicy New): wait for it.
  for (let tries = 0; ; tries++) {
    const found = await jsm.consumers.info(EVENTS_STREAM, consumerName(NAMESPACE, DESTINATION)).then(() => true, () => false);
    if (found) break;
    if (tries > 200) throw new Error(`consumer ${consumerName(NAMESPACE, DESTINATION)} not created by deliver:\n${deliverSpawn.tail.join("\n")}`);
    await sleep(50);
  }
  const pids: Pids = { deliver: deliver.pid, nats: nats.pid, receiver: receiverSpawn.child.pid, ingest: ingest.pid };
  log(`    nats-server ${nats.url} (pid ${nats.pid}), ingest ${ingestUrl} (pid ${ingest.pid}), deliver ${deliverOps}/metrics (pid ${deliver.pid}, node ${deliverFlags.join(" ") || "(no flags)"})`);

  const rss = { maxKB: 0, phaseMaxKB: 0 };
  const rssTimer = setInterval(() => {
    const kb = procStatusKB(deliver.pid, "VmRSS") ?? 0;
    rss.maxKB = Math.max(rss.maxKB, kb);
    rss.phaseMaxKB = Math.max(rss.phaseMaxKB, kb);
  }, 100);
  /** The deliver process's largest sampled RSS since the last call, MB. */
  const phaseRssMB = () => {
    const mb = round(Math.max(rss.phaseMaxKB, procStatusKB(deliver.pid, "VmRSS") ?? 0) / 1024, 1);
    rss.phaseMaxKB = 0;
    return mb;
  };
  log(`    deliver RSS after start: ${((procStatusKB(deliver.pid, "VmRSS") ?? NaN) / 1024).toFixed(1)} MB`);
  const phaseWindows: PhaseWindow[] = [];

  try {
    // 1: delivery of a backlog, against C. A shared VM's speed drifts by tens of percent within a
    // minute, and one drain lasts about a second: C and the drain are measured `rounds` times
    // each, alternating (C D, D C, ...) so that both see the same machine, and compared in sum.
    log(`\n[1] trackhook deliver: warm-up with ${fmt(P.warmup)} messages, then ${P.rounds} rounds of C and a backlog of ${fmt(P.backlog)} (${P.publishLive ? "published while deliver runs" : "published while deliver is paused"}) ...`);
    let from = monotonicUs();
    await receiver.reset();
    const warm = await publishAll(js, backlogMessages(P.warmup));
    const warmArrived = await receiver.waitFor(warm.published);
    await consumerSettled(jsm);
    phaseWindows.push({ phase: "warm-up", fromUs: from, toUs: monotonicUs() });
    if (!warmArrived.complete) log(`    warm-up: only ${fmt(warmArrived.count)} of ${fmt(warm.published)} arrived`);
    const warmRssMB = phaseRssMB();
    // Others' work that started meanwhile would skew the comparison with the ceiling.
    await waitForQuiet(QUIET_PHASE_WAIT_S, QUIET_BUSY_PCT, true);
    const metricsBefore = await scrape(deliverOps);

    /** C once: bare undici, fresh bodies of the same shape. */
    const ceilingRound = async () => {
      const requests = backlogMessages(P.backlog).map((m) => webhookRequest(m.data));
      await receiver.reset();
      const run = await withCpu({ receiver: receiverSpawn.child.pid }, () => ceiling(receiver, requests));
      const stats = await receiver.stats();
      return { ...run, stats, rate: arrivalRate(stats), arrivalSeconds: arrivalSeconds(stats) };
    };
    /** A backlog published while deliver is paused, then drained. */
    const drainRound = async (round: number) => {
      await receiver.reset();
      const attemptsBefore = await streamCount(jsm, ATTEMPTS_STREAM);
      const eventsBefore = await streamCount(jsm, EVENTS_STREAM);
      if (!P.publishLive) deliver.kill("SIGSTOP");
      const pub = await publishAll(js, backlogMessages(P.backlog)).finally(() => deliver.kill("SIGCONT"));
      const stored = (await streamCount(jsm, EVENTS_STREAM)) - eventsBefore;
      const start = monotonicUs();
      const drain = await withCpu(pids, () => receiver.waitFor(pub.published));
      phaseWindows.push({ phase: `backlog ${round + 1}`, fromUs: start, toUs: monotonicUs() });
      const stats = await receiver.stats();
      const settled = await consumerSettled(jsm);
      const attempts = (await streamCount(jsm, ATTEMPTS_STREAM)) - attemptsBefore;
      const check = stats.distinct === P.backlog && pub.published === P.backlog;
      return { pub, stored, drain, stats, settled, attempts, check, rate: arrivalRate(stats), arrivalSeconds: arrivalSeconds(stats) };
    };
    const ceilings: Array<Awaited<ReturnType<typeof ceilingRound>>> = [];
    const drains: Array<Awaited<ReturnType<typeof drainRound>>> = [];
    for (let r = 0; r < P.rounds; r++) {
      for (const side of r % 2 === 0 ? ["C", "D"] : ["D", "C"]) {
        if (side === "C") {
          const c = await ceilingRound();
          ceilings.push(c);
          log(`    round ${r + 1} C:       ${fmt(c.rate)} requests/s at the receiver (${round(c.arrivalSeconds, 2)} s); ${fmt(c.result.ok)} of ${fmt(c.result.sent)} answered 200, ${c.result.failures} failures; CPU ${cpuText(c.cpu)}${c.result.firstError ? `; first error: ${c.result.firstError}` : ""}`);
        } else {
          const d = await drainRound(r);
          drains.push(d);
          log(`    round ${r + 1} deliver: ${fmt(d.rate)} messages/s at the receiver (${round(d.arrivalSeconds, 2)} s); ${fmt(d.stats.distinct)} distinct of ${fmt(P.backlog)}: ${d.check ? "OK" : "MISMATCH"}; CPU ${cpuText(d.drain.cpu)}${d.drain.result.complete ? "" : `; gave up waiting: ${fmt(d.drain.result.count)} of ${fmt(d.pub.published)} arrived`}`);
        }
      }
    }
    const backlogRssMB = phaseRssMB();
    const backlogDiag = diagnostics(metricsBefore, await scrape(deliverOps));
    const dlq = await streamCount(jsm, DLQ_STREAM);
    const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
    // Rates in sum: all arrivals over all first-to-last arrival time.
    const ceilingRate = sum(ceilings.map((c) => c.stats.count - 1)) / sum(ceilings.map((c) => c.arrivalSeconds));
    const deliveryRate = sum(drains.map((d) => d.stats.count - 1)) / sum(drains.map((d) => d.arrivalSeconds));
    const ratio = deliveryRate / ceilingRate;
    const backlogCheck = drains.every((d) => d.check);
    const drainCpuSeconds = (name: string) => sum(drains.map((d) => ((d.drain.cpu[name] ?? NaN) / 100) * d.drain.seconds));
    const delivered = sum(drains.map((d) => d.stats.count));
    const usPerMessage = (name: string) => round((drainCpuSeconds(name) * 1e6) / delivered, 1);
    const ceilingUs = round((sum(ceilings.map((c) => ((c.cpu.bench ?? NaN) / 100) * c.seconds)) * 1e6) / sum(ceilings.map((c) => c.result.sent)), 1);
    const last = drains[drains.length - 1]!;
    log(`    in sum: C ${fmt(ceilingRate)} requests/s, deliver ${fmt(deliveryRate)} messages/s = ${round(ratio, 3)} of the ceiling (per round: ${drains.map((d, i) => round(d.rate / ceilings[i]!.rate, 3)).join(", ")})`);
    log(`    every round: each message arrived once ${backlogCheck ? "OK" : "MISMATCH"}; last round's consumer after: ${last.settled.pending} pending, ${last.settled.ackPending} unacknowledged, ${last.settled.redelivered} redelivered; ${fmt(last.attempts)} messages of attempt records (a turn's records share one); DLQ ${fmt(dlq)}`);
    log(`    CPU per message: deliver ${usPerMessage("deliver")} us, nats-server ${usPerMessage("nats")} us, receiver ${usPerMessage("receiver")} us; bare undici ${ceilingUs} us per request`);
    // What a delivered message costs the machine: with every core busy all the time, delivery could
    // reach at most cores × 1e6 / that messages per second, however the work were spread.
    const machineUs = round(usPerMessage("deliver") + usPerMessage("nats") + usPerMessage("receiver"), 1);
    const maxRate = (cpus().length * 1e6) / machineUs;
    const bound = maxRate / ceilingRate;
    log(`    a message costs the machine ${machineUs} us of CPU: with all ${cpus().length} cores busy, at most ${fmt(maxRate)} messages/s = ${round(bound, 3)} of C`);
    log(`    deliver RSS max: ${warmRssMB} MB in the warm-up, ${backlogRssMB} MB over the rounds`);
    log(`    deliver: ${diagText(backlogDiag)}${P.publishLive ? "" : " (the delay max includes the pauses)"}`);

    // 2: end-to-end latency through ingest and deliver.
    log(`\n[2] end to end: POST /v1/track open loop at ${fmt(P.rate)}/s for ${P.latencyMs / 1000}s, ingest's 200 -> receiver ...`);
    await receiver.reset();
    const latMetricsBefore = await scrape(deliverOps);
    from = monotonicUs();
    const lat = await withCpu(pids, () => trackOpenLoop(ingestUrl));
    const latArrived = await receiver.waitFor(lat.result.ok);
    phaseWindows.push({ phase: "latency", fromUs: from, toUs: monotonicUs() });
    const latStats = await receiver.stats(true);
    const latRssMB = phaseRssMB();
    const latDiag = diagnostics(latMetricsBefore, await scrape(deliverOps));
    const e2e: number[] = [];
    const fromSend: number[] = [];
    const seen = new Set<string>();
    for (const [id, at] of latStats.arrivals ?? []) {
      const messageId = id.slice(id.lastIndexOf("/") + 1);
      const ok = lat.result.okAt.get(messageId);
      if (ok === undefined || seen.has(messageId)) continue;
      seen.add(messageId);
      e2e.push(at - ok.at);
      fromSend.push(at - ok.sent);
    }
    const e2eP = percentiles(e2e);
    const fromSendP = percentiles(fromSend);
    const latencyCheck = seen.size === lat.result.ok && lat.result.ok === lat.result.sent;
    const early = e2e.filter((v) => v < 0).length;
    log(`    achieved ${fmt(lat.result.achievedRate)}/s; statuses ${JSON.stringify(lat.result.statuses)}; ingest answered in p50 ${lat.result.ingest.p50} ms, p99 ${lat.result.ingest.p99} ms`);
    log(`    200 -> arrival: p50 ${e2eP.p50} ms, p90 ${e2eP.p90} ms, p99 ${e2eP.p99} ms, p99.9 ${e2eP.p999} ms, max ${e2eP.max} ms${early ? ` (${early} arrived before the bench read the 200)` : ""}`);
    log(`    request sent -> arrival (ingest included): p50 ${fromSendP.p50} ms, p99 ${fromSendP.p99} ms, max ${fromSendP.max} ms; deliver RSS max ${latRssMB} MB`);
    log(`    receiver saw ${fmt(seen.size)} of ${fmt(lat.result.ok)} accepted (${fmt(latStats.count)} requests): ${latencyCheck ? "OK" : "MISMATCH"}${latArrived.complete ? "" : " (gave up waiting)"}`);
    log(`    CPU ${cpuText(lat.cpu)}; load generator's own event-loop delay p99 ${lat.result.benchLoopDelay.p99} ms, max ${lat.result.benchLoopDelay.max} ms`);
    log(`    deliver: ${diagText(latDiag)}`);

    // 3: RSS, read before deliver stops.
    clearInterval(rssTimer);
    const hwmKB = procStatusKB(deliver.pid, "VmHWM") ?? NaN;
    // What the RSS is made of at the end: private memory, and pages of files (the node binary) shared with other processes.
    const anonMB = round((procStatusKB(deliver.pid, "RssAnon") ?? NaN) / 1024, 1);
    const fileMB = round((procStatusKB(deliver.pid, "RssFile") ?? NaN) / 1024, 1);
    rss.maxKB = Math.max(rss.maxKB, procStatusKB(deliver.pid, "VmRSS") ?? 0);
    const rssMB = hwmKB / 1024;

    stopping = true;
    await stopChild(deliver);
    const complaints = deliverSpawn.tail.filter((line) => /"level":(40|50|60)/.test(line));
    if (complaints.length) {
      log(`\n  deliver logged ${complaints.length} warnings/errors (last ${Math.min(complaints.length, 5)}):`);
      for (const line of complaints.slice(-5)) log(`    ${line.slice(0, 300)}`);
    }
    const profile = keepProfile("delivery", profDir, phaseWindows, /\/dist\/|@nats-io|undici/);

    // Report.
    const rows: Array<[string, string, string, string]> = [
      [`S  WebhookSender alone (no NATS)`, `${fmt(senderRate)} msg/s`, "", ""],
      [`C  bare undici POST (${P.concurrency} in flight), ${P.rounds} rounds`, `${fmt(ceilingRate)} msg/s`, "", ""],
      [`1  trackhook deliver, backlog (maxInFlight ${P.concurrency}), ${P.rounds} rounds`, `${fmt(deliveryRate)} msg/s`, "", ""],
      ["   deliver / C", round(ratio, 3).toFixed(3), `>= ${TARGETS.ratio.toFixed(1)}`, verdict(ratio >= TARGETS.ratio)],
      ["   deliver / C if every core were busy (the bound)", round(bound, 3).toFixed(3), "", ""],
      ["   backlog: distinct arrivals", `${fmt(sum(drains.map((d) => d.stats.distinct)))} / ${fmt(P.backlog * P.rounds)}`, "equal", verdict(backlogCheck)],
      [`2  200 -> arrival p50 @ ${fmt(lat.result.achievedRate)}/s`, `${e2eP.p50} ms`, "", ""],
      [`   200 -> arrival p99 @ ${fmt(lat.result.achievedRate)}/s`, `${e2eP.p99} ms`, `< ${TARGETS.p99Ms} ms`, verdict(e2eP.p99 < TARGETS.p99Ms)],
      ["   latency: delivered / accepted", `${fmt(seen.size)} / ${fmt(lat.result.sent)}`, "equal", verdict(latencyCheck)],
      ["3  deliver peak RSS (VmHWM)", `${rssMB.toFixed(1)} MB`, "", ""],
    ];
    printTable(rows);
    log(`  (sampled VmRSS max ${(rss.maxKB / 1024).toFixed(1)} MB; at the end ${anonMB} MB anonymous + ${fileMB} MB file-backed, heap ${latDiag.heapUsedMB}/${latDiag.heapTotalMB} MB used/total)`);
    if (profile) printProfile("CPU profile of deliver (bench/results/delivery-latest.cpuprofile)", profile);

    const results = {
      date: new Date().toISOString(),
      commit: gitCommit(),
      machine: { cpus: cpus().length, model: cpus()[0]?.model, node: process.version, loadavgAtStart: round(quiet.load, 2), busyPctAtStart: quiet.busyPct },
      params: { ...P, eventBytes: EVENT_BYTES, storedBytes: STORED_BYTES, bodyBytes: BODY_BYTES, deliverNodeFlags: deliverFlags },
      ceiling: {
        perSecond: round(ceilingRate, 0), clientCpuUsPerRequest: ceilingUs,
        rounds: ceilings.map((c) => ({ perSecond: round(c.rate, 0), clientPerSecond: round(c.result.clientPerSecond, 0), sent: c.result.sent, ok: c.result.ok, failures: c.result.failures, receiverDistinct: c.stats.distinct, cpuPct: c.cpu })),
      },
      senderAlone: { perSecond: round(senderRate, 0), sent: snd.result.sent, delivered: snd.result.delivered, cpuPct: snd.cpu, senderCpuUsPerRequest: senderUs },
      delivery: {
        perSecond: round(deliveryRate, 0), check: backlogCheck, dlq, deliver: backlogDiag,
        cpuUsPerMessage: { deliver: usPerMessage("deliver"), nats: usPerMessage("nats"), receiver: usPerMessage("receiver") },
        rounds: drains.map((d) => ({
          perSecond: round(d.rate, 0), arrivalSeconds: round(d.arrivalSeconds, 3), published: d.pub.published, publishPerSecond: round(d.pub.perSecond, 0), publishFailures: d.pub.failures,
          stored: d.stored, received: d.stats.count, distinct: d.stats.distinct, check: d.check, complete: d.drain.result.complete, consumer: d.settled, attemptRecordMessages: d.attempts, cpuPct: d.drain.cpu,
        })),
      },
      latency: {
        targetRate: lat.result.targetRate, achievedRate: lat.result.achievedRate, sent: lat.result.sent, ok: lat.result.ok, statuses: lat.result.statuses,
        delivered: seen.size, received: latStats.count, check: latencyCheck, ingestAnswer: lat.result.ingest, okToArrival: e2eP, sendToArrival: fromSendP,
        arrivedBeforeOk: early, benchLoopDelay: lat.result.benchLoopDelay, cpuPct: lat.cpu, deliver: latDiag,
      },
      rss: { peakMB: round(rssMB, 1), sampledMaxMB: round(rss.maxKB / 1024, 1), endAnonMB: anonMB, endFileMB: fileMB, warmupMaxMB: warmRssMB, backlogMaxMB: backlogRssMB, latencyMaxMB: latRssMB },
      ratios: {
        deliveryOverCeiling: round(ratio, 3), perRound: drains.map((d, i) => round(d.rate / ceilings[i]!.rate, 3)),
        /** At most, on this machine: cores / (CPU µs per message of deliver, nats-server and receiver) / C. */
        boundOnAllCores: round(bound, 3), machineCpuUsPerMessage: machineUs,
      },
      targets: {
        ratio: { target: TARGETS.ratio, met: ratio >= TARGETS.ratio },
        p99Ms: { target: TARGETS.p99Ms, met: e2eP.p99 < TARGETS.p99Ms },
      },
      deliverWarnings: complaints.length,
      ...(profile ? { profile } : {}),
    };
    writeResults("delivery", results);
  } finally {
    clearInterval(rssTimer);
    await nc.close().catch(() => {});
  }
}

await runBench(main);
