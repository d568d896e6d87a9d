// Ingest benchmark (not a test): prints a report, writes bench/results/ingest-latest.json, exits 0.
//
//   npm run bench:ingest                      # or: node bench/ingest.ts [options]
//   node bench/ingest.ts --cpu-prof           # also profiles the ingest process: top frames per phase
//   node bench/ingest.ts --ingest-node-options="--max-semi-space-size=16"   # try V8 flags on the ingest
//   node bench/ingest.ts --ingest-cli /tmp/other-build/dist/cli/main.js   # compare another build
//
// Needs a build (`npm run build`: the ingest runs as `node dist/cli/main.js ingest`) and
// nats-server (.tools/bin or PATH). Everything listens on 127.0.0.1. In one run it measures:
//   A  raw JetStream ceiling: js.publish of the same ~300-byte events, pipelined, one process
//   1  POST /v1/batch (100 events/request) against `trackhook ingest`, then checks the stream count
//   B  bare Fastify ceiling: one POST route that JSON.parses the body and answers {"success":true}
//   2  POST /v1/track against the ingest and against B at the same concurrencies (16, 32, 128, 256),
//      the two in alternating 1-second slices at each; then each at its peak concurrency, again
//      in alternating slices: the ratio. The ratio at each concurrency is reported too.
//   3  /v1/track latency (p50/p99) at half the measured peak, open-loop (fixed schedule)
//   4  peak RSS of the ingest process (VmHWM, and the max of sampled VmRSS)
// CPU use of every process is sampled per phase from /proc, to show who is the bottleneck, and the
// ingest's /metrics are scraped around each phase (PubAck time, event-loop delay, GC, heap).
// Two cores run the load generator, the ingest and nats-server together: read the "other" CPU
// column (anything else running on the machine) before trusting a run.
import { copyFileSync, existsSync, statSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Pool } from "undici";
import { EVENTS_STREAM, eventMsgId, eventSubject, eventsStreamConfig } from "../dataplane/nats/mod.ts";
import {
  ROOT, cpuText, openLoop, keepProfile, writeResults, fmt, gitCommit, log, monotonicUs, percentiles, printProfile, printTable, procStatusKB, round,
  runBench, shippedNodeFlags, spawnUntil, startNats, stopChild, tempDir, usPer, verdict, waitForQuiet,
  withCpu, type CpuShare, type Percentiles, type PhaseWindow, type Pids, scrape, bucketQuantile, LOOP_RESOLUTION_MS, type Samples, nextMessageId, trackEvent, natsConnect, streamCount, positiveFlag,
} from "./lib.ts";

const BARE = join(ROOT, "bench", "bare-fastify.ts");

const { values: flags } = parseArgs({
  options: {
    "measure-s": { type: "string", default: "8" },
    "warmup-s": { type: "string", default: "2" },
    "latency-s": { type: "string", default: "10" },
    window: { type: "string", default: "256" },
    "batch-concurrency": { type: "string", default: "8" },
    "batch-size": { type: "string", default: "100" },
    "track-concurrency": { type: "string", default: "16,32,128,256" },
    "cpu-prof": { type: "boolean", default: false },
    "ingest-node-options": { type: "string", default: "" },
    "ingest-cli": { type: "string", default: "" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (flags.help) {
  process.stdout.write(`Usage: node bench/ingest.ts [--measure-s 8] [--warmup-s 2] [--latency-s 10] [--window 256]
       [--batch-concurrency 8] [--batch-size 100] [--track-concurrency 16,32,128,256] [--cpu-prof]
       [--ingest-node-options="--max-old-space-size=128"]   (extra node flags for the ingest process)
       [--ingest-cli <path to cli/main.js>]                (another build of the ingest; default dist/cli/main.js)\n`);
  process.exit(0);
}
const num = (name: keyof typeof flags) => positiveFlag(flags, name);
/** "32,128": whole numbers of requests in flight. */
const concurrencies = (list: string) =>
  list.split(",").map((item) => {
    const n = Number(item);
    if (!Number.isInteger(n) || n <= 0) throw new Error(`--track-concurrency takes positive whole numbers separated by commas, got ${JSON.stringify(list)}`);
    return n;
  });
const P = {
  measureMs: num("measure-s") * 1000,
  warmupMs: num("warmup-s") * 1000,
  latencyMs: num("latency-s") * 1000,
  window: Math.floor(num("window")),
  batchConcurrency: Math.floor(num("batch-concurrency")),
  batchSize: Math.floor(num("batch-size")),
  trackConcurrency: concurrencies(String(flags["track-concurrency"])),
  cpuProf: flags["cpu-prof"] === true,
  cli: flags["ingest-cli"] || join(ROOT, "dist", "cli", "main.js"),
  ingestNodeOptions: (flags["ingest-node-options"] ?? "").split(/\s+/).filter(Boolean),
};

const TARGETS = { batchRatio: 1.0, trackRatio: 0.5, rssMB: 200 };
/** /v1/track against the ingest and bare Fastify alternates in slices this long, of which the first TRACK_SETTLE_MS are not counted. */
const TRACK_SLICE_MS = 1000;
const TRACK_SETTLE_MS = 200;
/** Before starting, wait up to QUIET_WAIT_S seconds for the machine to be under QUIET_BUSY_PCT CPU. */
const QUIET_WAIT_S = 60;
const QUIET_BUSY_PCT = 20;

// ---------------------------------------------------------------------------------------------
// Events: ~300-byte track messages with unique messageIds (dedup would drop repeats).

const WRITE_KEY = "dev-write-key"; // examples/dev.yaml
const NAMESPACE = "default";
const SOURCE = "website";
const AUTH = `Basic ${Buffer.from(`${WRITE_KEY}:`).toString("base64")}`;
function batchBody(size: number): string {
  const items = new Array<string>(size);
  for (let i = 0; i < size; i++) items[i] = trackEvent(nextMessageId());
  return `{"batch":[${items.join(",")}],"sentAt":"2026-01-15T10:00:01.000Z"}`;
}

const EVENT_BYTES = Buffer.byteLength(trackEvent("bench-xxxxxx-00000000"));

// ---------------------------------------------------------------------------------------------
// Load generation.

interface ClosedLoopResult {
  /** Completed requests (any status) and 200s inside the measured interval. */
  requests: number;
  ok: number;
  perSecond: number;
  eventsPerSecond: number;
  /** Over the whole phase, warm-up included: events in 200 responses, for the stream check. */
  totalOkEvents: number;
  totalRequests: number;
  statuses: Record<string, number>;
  failures: number;
  firstError?: string;
}

const trackPool = (origin: string, concurrency: number) => new Pool(origin, { connections: concurrency, pipelining: 1, keepAliveTimeout: 60_000 });

/**
 * `concurrency` workers, each sending the next request when its previous one is answered. With
 * `pool`, its connections are used and left open; otherwise the loop opens and closes its own.
 */
async function closedLoop(opts: {
  origin: string;
  path: string;
  concurrency: number;
  body: () => string;
  eventsPerRequest: number;
  warmupMs: number;
  measureMs: number;
  pool?: Pool;
}): Promise<ClosedLoopResult> {
  const pool = opts.pool ?? trackPool(opts.origin, opts.concurrency);
  const headers = { "content-type": "application/json", authorization: AUTH };
  const start = performance.now();
  const measureFrom = start + opts.warmupMs;
  const end = measureFrom + opts.measureMs;
  const r: ClosedLoopResult = { requests: 0, ok: 0, perSecond: 0, eventsPerSecond: 0, totalOkEvents: 0, totalRequests: 0, statuses: {}, failures: 0 };
  const worker = async () => {
    while (performance.now() < end) {
      const body = opts.body();
      let status = "error";
      try {
        const res = await pool.request({ method: "POST", path: opts.path, headers, body });
        status = String(res.statusCode);
        if (res.statusCode === 200) await res.body.dump();
        else r.firstError ??= `${res.statusCode} ${await res.body.text()}`;
      } catch (err) {
        r.failures++;
        r.firstError ??= (err as Error).message;
      }
      const now = performance.now();
      r.totalRequests++;
      r.statuses[status] = (r.statuses[status] ?? 0) + 1;
      if (status === "200") r.totalOkEvents += opts.eventsPerRequest;
      if (now >= measureFrom && now < end) {
        r.requests++;
        if (status === "200") r.ok++;
      }
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  if (!opts.pool) await pool.close();
  r.perSecond = r.ok / (opts.measureMs / 1000);
  r.eventsPerSecond = r.perSecond * opts.eventsPerRequest;
  return r;
}

/** One side of an alternating run: its counts, CPU and measured time summed over its slices. */
interface SideTotals {
  requests: number;
  ok: number;
  totalRequests: number;
  totalOkEvents: number;
  statuses: Record<string, number>;
  failures: number;
  firstError?: string;
  measuredMs: number;
  /** Process name -> CPU seconds over this side's slices, the slices' wall seconds, and the requests answered in them. */
  cpuSeconds: Record<string, number>;
  seconds: number;
  sliceRequests: number;
}

/**
 * Closed-loop /v1/track load on two servers in alternating slices (A B B A A B ...), each on
 * connections of its own that stay open. A shared VM's speed drifts by tens of percent within
 * a minute; measured slice by slice, in an order that cancels a steady drift, both servers see
 * the same machine. Each slice's first `settleMs` are not counted.
 */
async function alternating(opts: {
  sides: Array<{ name: string; origin: string; pids: Pids; concurrency: number }>;
  path: string;
  body: () => string;
  warmupMs: number;
  slices: number;
  sliceMs: number;
  settleMs: number;
}): Promise<Record<string, SideTotals>> {
  const pools = opts.sides.map((side) => trackPool(side.origin, side.concurrency));
  const totals = opts.sides.map((): SideTotals => ({ requests: 0, ok: 0, totalRequests: 0, totalOkEvents: 0, statuses: {}, failures: 0, measuredMs: 0, cpuSeconds: {}, seconds: 0, sliceRequests: 0 }));
  const run = (i: number, warmupMs: number, measureMs: number) =>
    closedLoop({ origin: opts.sides[i]!.origin, path: opts.path, concurrency: opts.sides[i]!.concurrency, body: opts.body, eventsPerRequest: 1, warmupMs, measureMs, pool: pools[i] });
  const add = (t: SideTotals, r: ClosedLoopResult) => {
    t.totalRequests += r.totalRequests;
    t.totalOkEvents += r.totalOkEvents;
    t.failures += r.failures;
    t.firstError ??= r.firstError;
    for (const [status, n] of Object.entries(r.statuses)) t.statuses[status] = (t.statuses[status] ?? 0) + n;
  };
  try {
    for (let i = 0; i < opts.sides.length; i++) add(totals[i]!, await run(i, opts.warmupMs, 0));
    for (let slice = 0; slice < opts.slices; slice++) {
      const order = opts.sides.map((_, i) => i);
      if (slice % 2 === 1) order.reverse();
      for (const i of order) {
        const t = totals[i]!;
        const { result, cpu, seconds } = await withCpu(opts.sides[i]!.pids, () => run(i, opts.settleMs, opts.sliceMs));
        add(t, result);
        t.requests += result.requests;
        t.ok += result.ok;
        t.measuredMs += opts.sliceMs;
        t.seconds += seconds;
        t.sliceRequests += result.totalRequests;
        for (const [name, pct] of Object.entries(cpu)) t.cpuSeconds[name] = (t.cpuSeconds[name] ?? 0) + (pct / 100) * seconds;
      }
    }
  } finally {
    await Promise.all(pools.map((pool) => pool.close()));
  }
  return Object.fromEntries(opts.sides.map((side, i) => [side.name, totals[i]!]));
}

/** A side's 200s per measured second. */
const sideRate = (t: SideTotals) => t.ok / (t.measuredMs / 1000);

/**
 * CPU µs per request answered in a side's slices, of the named processes together. For all the
 * processes involved it is what a request costs the machine: with every core busy all the time, a
 * side can serve at most cores × 1e6 / that requests per second, and in ratio to the ceiling
 * that is the best the ratio could read on this machine, however the work were spread.
 */
const sideUs = (t: SideTotals, ...names: string[]) => round((names.reduce((total, name) => total + (t.cpuSeconds[name] ?? NaN), 0) * 1e6) / t.sliceRequests, 1);

/** CPU % of one core per process over a side's slices. */
const cpuShare = (t: SideTotals): CpuShare => Object.fromEntries(Object.entries(t.cpuSeconds).map(([name, s]) => [name, round((s / t.seconds) * 100, 0)]));

interface LatencyResult {
  targetRate: number;
  achievedRate: number;
  sent: number;
  ok: number;
  okEvents: number;
  statuses: Record<string, number>;
  /** From the scheduled send time (includes any queueing: no coordinated omission). */
  fromSchedule: Percentiles;
  /** From the moment the request was handed to the client. */
  service: Percentiles;
  /** This process's own event-loop delay, ms: high values would mean the load generator, not the server, adds latency. */
  benchLoopDelay: { p99: number; max: number };
  /** Most requests outstanding at once, and the connections the client had open then (each costs the ingest memory). */
  maxInFlight: number;
  maxConnections: number;
}

/** /v1/track at a fixed rate (bench/lib.ts openLoop), with the latency of every answer. */
async function trackOpenLoop(opts: { origin: string; path: string; rate: number; durationMs: number; body: () => string }): Promise<LatencyResult> {
  const pool = new Pool(opts.origin, { connections: 512, pipelining: 1, keepAliveTimeout: 60_000 });
  const headers = { "content-type": "application/json", authorization: AUTH };
  const fromSchedule: number[] = [];
  const service: number[] = [];
  const statuses: Record<string, number> = {};
  let ok = 0;
  let maxConnections = 0;
  const run = await openLoop(opts.rate, opts.durationMs, (scheduled) => {
    const sent = performance.now();
    const request = pool
      .request({ method: "POST", path: opts.path, headers, body: opts.body() })
      .then(async (res) => {
        await res.body.dump();
        return String(res.statusCode);
      })
      .catch(() => "error")
      .then((status) => {
        const done = performance.now();
        statuses[status] = (statuses[status] ?? 0) + 1;
        if (status === "200") ok++;
        fromSchedule.push(done - scheduled);
        service.push(done - sent);
      });
    maxConnections = Math.max(maxConnections, pool.stats.connected);
    return request;
  });
  await pool.close();
  return {
    targetRate: round(opts.rate, 0),
    achievedRate: run.achievedRate,
    sent: run.sent,
    ok,
    okEvents: ok,
    statuses,
    fromSchedule: percentiles(fromSchedule),
    service: percentiles(service),
    benchLoopDelay: run.benchLoopDelay,
    maxInFlight: run.maxInFlight,
    maxConnections,
  };
}

// ---------------------------------------------------------------------------------------------
// Phases.

/** The stream settings `trackhook ingest` uses by default (72h, 10GiB, 10m duplicate window, R1). */
const STREAM = eventsStreamConfig({ maxAgeMs: 72 * 3_600_000, maxBytes: 10 * 1024 ** 3, duplicateWindowMs: 600_000, replicas: 1 });

async function rawCeiling(): Promise<{ eventsPerSecond: number; published: number; stored: number; failures: number; cpu: CpuShare; cpuUsPerEvent: number }> {
  const server = await startNats("trackhook-bench-raw-");
  const nc = await natsConnect(server.url);
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add(STREAM);
    const js = jetstream(nc);
    const subject = eventSubject(NAMESPACE, SOURCE, "track");
    let published = 0;
    let measured = 0;
    let failures = 0;
    const { cpu, seconds } = await withCpu({ nats: server.pid }, async () => {
      const start = performance.now();
      const measureFrom = start + P.warmupMs;
      const end = measureFrom + P.measureMs;
      // A window of P.window publishes in flight: each slot publishes its next one when acked.
      const slot = async () => {
        while (performance.now() < end) {
          const messageId = nextMessageId();
          try {
            await js.publish(subject, trackEvent(messageId), {
              msgID: eventMsgId(NAMESPACE, SOURCE, messageId),
              expect: { streamName: EVENTS_STREAM },
              timeout: 5000,
            });
            published++;
            const now = performance.now();
            if (now >= measureFrom && now < end) measured++;
          } catch {
            failures++;
          }
        }
      };
      await Promise.all(Array.from({ length: P.window }, slot));
    });
    const stored = (await jsm.streams.info(EVENTS_STREAM)).state.messages;
    return { eventsPerSecond: measured / (P.measureMs / 1000), published, stored, failures, cpu, cpuUsPerEvent: usPer(cpu.bench, seconds, published) };
  } finally {
    await nc.close();
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// The ingest's own /metrics, scraped around each phase: where a request's time goes.

interface IngestDiagnostics {
  /** JetStream publish -> PubAck per message (trackhook_ingest_publish_duration_seconds), ms. */
  publishes: number;
  publishMeanMs: number;
  publishP50Ms: number;
  publishP99Ms: number;
  /** Event-loop delay over the phase beyond prom-client's 10 ms sampling interval (reset at each scrape), ms. */
  loopDelayP50Ms: number;
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  /** Time in GC over the phase, ms, and the heap at its end, MB. */
  gcMs: number;
  heapUsedMB: number;
  heapTotalMB: number;
  /** V8's young generation at the end of the phase (it grows under a high allocation rate), MB. */
  newSpaceMB: number;
  /** Old generation and Buffer/ArrayBuffer memory outside the heap at the end of the phase, MB. */
  oldSpaceMB: number;
  externalMB: number;
  /** Full (mark-compact) collections over the phase. */
  majorGcs: number;
}

const PUBLISH = "trackhook_ingest_publish_duration_seconds";

const loopDelay = (m: Samples, stat: string) => round(Math.max(0, (m.get(`nodejs_eventloop_lag_${stat}_seconds`) ?? NaN) * 1000 - LOOP_RESOLUTION_MS), 1);

function diagnostics(before: Samples, after: Samples): IngestDiagnostics {
  const delta = (key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0);
  const sumMatching = (prefix: string, m: Samples) => [...m].filter(([k]) => k.startsWith(prefix)).reduce((a, [, v]) => a + v, 0);
  const publishes = delta(`${PUBLISH}_count`);
  return {
    publishes,
    publishMeanMs: round((delta(`${PUBLISH}_sum`) / Math.max(1, publishes)) * 1000, 2),
    publishP50Ms: bucketQuantile(PUBLISH, before, after, 0.5),
    publishP99Ms: bucketQuantile(PUBLISH, before, after, 0.99),
    loopDelayP50Ms: loopDelay(after, "p50"),
    loopDelayP99Ms: loopDelay(after, "p99"),
    loopDelayMaxMs: loopDelay(after, "max"),
    gcMs: round((sumMatching("nodejs_gc_duration_seconds_sum", after) - sumMatching("nodejs_gc_duration_seconds_sum", before)) * 1000, 0),
    heapUsedMB: round((after.get("nodejs_heap_size_used_bytes") ?? NaN) / 2 ** 20, 1),
    heapTotalMB: round((after.get("nodejs_heap_size_total_bytes") ?? NaN) / 2 ** 20, 1),
    newSpaceMB: round((after.get('nodejs_heap_space_size_total_bytes{space="new"}') ?? NaN) / 2 ** 20, 1),
    oldSpaceMB: round((after.get('nodejs_heap_space_size_total_bytes{space="old"}') ?? NaN) / 2 ** 20, 1),
    externalMB: round((after.get("nodejs_external_memory_bytes") ?? NaN) / 2 ** 20, 1),
    majorGcs: delta('nodejs_gc_duration_seconds_count{kind="major"}'),
  };
}

const phaseWindows: PhaseWindow[] = [];
const rss = { maxKB: 0, phaseMaxKB: 0 };

/** Runs a phase against the ingest with CPU accounting, /metrics before and after, and its RSS. */
async function ingestPhase<T>(phase: string, origin: string, pids: Pids, run: () => Promise<T>) {
  const before = await scrape(origin);
  rss.phaseMaxKB = 0;
  const fromUs = monotonicUs();
  const { result, cpu, seconds } = await withCpu(pids, run);
  phaseWindows.push({ phase, fromUs, toUs: monotonicUs() });
  const ingest = { ...diagnostics(before, await scrape(origin)), rssMaxMB: round(rss.phaseMaxKB / 1024, 1) };
  return { result, cpu, seconds, ingest };
}

const diagText = (d: IngestDiagnostics & { rssMaxMB: number }) =>
  `publish->PubAck mean ${d.publishMeanMs} ms (p50 <= ${d.publishP50Ms} ms, p99 <= ${d.publishP99Ms} ms); ` +
  `event-loop delay p50 ${d.loopDelayP50Ms} ms, p99 ${d.loopDelayP99Ms} ms, max ${d.loopDelayMaxMs} ms;\n` +
  `            GC ${d.gcMs} ms; heap used/total at end ${d.heapUsedMB}/${d.heapTotalMB} MB (new ${d.newSpaceMB}, old ${d.oldSpaceMB} MB), external ${d.externalMB} MB, ${d.majorGcs} major GCs; RSS max ${d.rssMaxMB} MB`;

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  if (!existsSync(P.cli)) throw new Error(`${P.cli} not found: run \`npm run build\` first`);
  log(`trackhook ingest bench: ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}, event ${EVENT_BYTES} bytes`);
  log(`  warm-up ${P.warmupMs / 1000}s + measure ${P.measureMs / 1000}s per phase; publish window ${P.window}; batch ${P.batchSize} x ${P.batchConcurrency} conc; track ${P.trackConcurrency.join(" and ")} conc`);
  // On a shared machine, wait (a bounded time) for whatever else is running to finish.
  const { busyPct, load } = await waitForQuiet(QUIET_WAIT_S, QUIET_BUSY_PCT);
  log(`  ${P.cli.startsWith(ROOT) ? P.cli.slice(ROOT.length) : P.cli} built ${statSync(P.cli).mtime.toISOString()}${P.cpuProf ? "; ingest runs with --cpu-prof (figures include profiler overhead)" : ""}${P.ingestNodeOptions.length ? `; ingest node flags: ${P.ingestNodeOptions.join(" ")}` : ""}`);

  // A: raw JetStream ceiling.
  log("\n[A] raw JetStream publish ceiling ...");
  const raw = await rawCeiling();
  log(`    ${fmt(raw.eventsPerSecond)} events/s (stored ${fmt(raw.stored)} of ${fmt(raw.published)} acked, ${raw.failures} failures)`);
  log(`    CPU ${cpuText(raw.cpu)}; publisher ${raw.cpuUsPerEvent} us CPU per event`);

  // The ingest process with its own nats-server and store.
  const nats = await startNats("trackhook-bench-store-");
  const configDir = tempDir("trackhook-bench-config-");
  copyFileSync(join(ROOT, "examples", "dev.yaml"), join(configDir, "dev.yaml"));
  const profDir = P.cpuProf ? tempDir("trackhook-bench-prof-") : undefined;
  // The flags the CLI ships in its shebang apply here too, so the bench measures the ingest as users run it.
  const nodeFlags = [...shippedNodeFlags(P.cli), ...P.ingestNodeOptions, ...(profDir ? ["--cpu-prof", "--cpu-prof-dir", profDir] : [])];
  const ingestSpawn = await spawnUntil(
    process.execPath,
    [...nodeFlags, P.cli, "ingest", "--config", configDir, "--nats", nats.url, "--host", "127.0.0.1", "--port", "0", "--log-level", "info"],
    /"address":"(http:\/\/[^"]+)".*"msg":"ingest listening"|"msg":"ingest listening".*"address":"(http:\/\/[^"]+)"/,
  );
  const ingest = ingestSpawn.child;
  const ingestUrl = ingestSpawn.match[1] ?? ingestSpawn.match[2]!;
  const bare = await spawnUntil(process.execPath, [BARE, "0"], /^listening (http:\/\/\S+)/);
  const bareUrl = bare.match[1]!;
  const pids: Pids = { ingest: ingest.pid, nats: nats.pid };
  log(`    ingest ${ingestUrl} (pid ${ingest.pid}), nats-server ${nats.url} (pid ${nats.pid}), bare fastify ${bareUrl} (pid ${bare.child.pid})`);

  const rssTimer = setInterval(() => {
    const kb = procStatusKB(ingest.pid, "VmRSS") ?? 0;
    rss.maxKB = Math.max(rss.maxKB, kb);
    rss.phaseMaxKB = Math.max(rss.phaseMaxKB, kb);
  }, 100);
  log(`    ingest RSS after start: ${((procStatusKB(ingest.pid, "VmRSS") ?? NaN) / 1024).toFixed(1)} MB`);

  const nc = await natsConnect(nats.url);
  const jsm = await jetstreamManager(nc);
  try {
    // 1: /v1/batch.
    log(`\n[1] POST /v1/batch (${P.batchSize} events/request, concurrency ${P.batchConcurrency}) ...`);
    const before = await streamCount(jsm, EVENTS_STREAM);
    const batch = await ingestPhase("batch", ingestUrl, pids, () =>
      closedLoop({ origin: ingestUrl, path: "/v1/batch", concurrency: P.batchConcurrency, body: () => batchBody(P.batchSize), eventsPerRequest: P.batchSize, warmupMs: P.warmupMs, measureMs: P.measureMs }),
    );
    const batchStored = (await streamCount(jsm, EVENTS_STREAM)) - before;
    const batchCheck = batchStored === batch.result.totalOkEvents;
    const batchUs = usPer(batch.cpu.ingest, batch.seconds, batch.result.totalOkEvents);
    log(`    ${fmt(batch.result.eventsPerSecond)} events/s = ${fmt(batch.result.perSecond)} requests/s; statuses ${JSON.stringify(batch.result.statuses)}`);
    log(`    CPU ${cpuText(batch.cpu)}; ingest ${batchUs} us CPU per event`);
    log(`    ingest: ${diagText(batch.ingest)}`);
    log(`    stream check: sent ${fmt(batch.result.totalOkEvents)} events in 200 responses, stream holds ${fmt(batchStored)} new messages: ${batchCheck ? "OK" : "MISMATCH"}`);
    if (batch.result.firstError) log(`    first error: ${batch.result.firstError.slice(0, 300)}`);

    // 2: /v1/track, ingest and bare Fastify at the same concurrencies; each is rated at its peak.
    // The ingest answers after a JetStream round trip, so it needs more requests in flight than
    // bare Fastify to be busy; the load generator, which shares the two cores, slows bare Fastify
    // down as concurrency rises. One concurrency would favour one of them. At each concurrency
    // the two take turns in short slices (see alternating()).
    const slices = Math.max(1, Math.round(P.measureMs / TRACK_SLICE_MS));
    const trackRuns: Array<{ concurrency: number; perSecond: number; statuses: Record<string, number>; okEvents: number; stored: number; check: boolean; cpu: Record<string, number>; us: number; ingest: IngestDiagnostics & { rssMaxMB: number } }> = [];
    const bareRuns: Array<{ concurrency: number; perSecond: number; statuses: Record<string, number>; cpu: Record<string, number>; us: number }> = [];
    for (const concurrency of P.trackConcurrency) {
      log(`\n[2/B] POST /v1/track (concurrency ${concurrency}), the ingest and bare Fastify in turns of ${TRACK_SLICE_MS / 1000}s, ${slices} each ...`);
      const beforeTrack = await streamCount(jsm, EVENTS_STREAM);
      const phase = await ingestPhase(`track@${concurrency}`, ingestUrl, {}, () =>
        alternating({
          sides: [{ name: "ingest", origin: ingestUrl, pids, concurrency }, { name: "bare", origin: bareUrl, pids: { bare: bare.child.pid }, concurrency }],
          path: "/v1/track", body: () => trackEvent(nextMessageId()),
          warmupMs: P.warmupMs, slices, sliceMs: TRACK_SLICE_MS, settleMs: TRACK_SETTLE_MS,
        }),
      );
      const { ingest: t, bare: b } = phase.result as { ingest: SideTotals; bare: SideTotals };
      const stored = (await streamCount(jsm, EVENTS_STREAM)) - beforeTrack;
      const tCpu = cpuShare(t);
      const run = {
        concurrency, perSecond: sideRate(t), statuses: t.statuses, okEvents: t.totalOkEvents, stored,
        check: stored === t.totalOkEvents, cpu: tCpu, us: sideUs(t, "ingest"), ingest: phase.ingest,
      };
      trackRuns.push(run);
      log(`    ingest: ${fmt(run.perSecond)} requests/s; statuses ${JSON.stringify(run.statuses)}`);
      log(`      CPU ${cpuText(run.cpu)}; ingest ${run.us} us CPU per request`);
      log(`      ${diagText(run.ingest)}`);
      log(`      stream check: ${fmt(run.okEvents)} accepted, stream holds ${fmt(stored)} new messages: ${run.check ? "OK" : "MISMATCH"}`);
      if (t.firstError) log(`      first error: ${t.firstError.slice(0, 300)}`);
      const bareRun = { concurrency, perSecond: sideRate(b), statuses: b.statuses, cpu: cpuShare(b), us: sideUs(b, "bare") };
      bareRuns.push(bareRun);
      log(`    bare:   ${fmt(bareRun.perSecond)} requests/s; statuses ${JSON.stringify(bareRun.statuses)}`);
      log(`      CPU ${cpuText(bareRun.cpu)}; bare server ${bareRun.us} us CPU per request`);
      log(`    ingest / bare at ${concurrency}: ${round(run.perSecond / bareRun.perSecond, 3).toFixed(3)}`);
    }
    const peak = <T extends { perSecond: number }>(runs: T[]) => runs.reduce((best, r) => (r.perSecond > best.perSecond ? r : best));
    const sweepTrack = peak(trackRuns);
    const sweepBare = peak(bareRuns);

    // The two peaks were found at different moments of the sweep; the ratio is measured with
    // both at their peak concurrency, head to head in alternating slices.
    log(`\n[2/B] at their peaks: the ingest at ${sweepTrack.concurrency} and bare Fastify at ${sweepBare.concurrency} in flight, in turns of ${TRACK_SLICE_MS / 1000}s, ${slices} each ...`);
    const beforePeaks = await streamCount(jsm, EVENTS_STREAM);
    const peaks = await ingestPhase("track@peak", ingestUrl, {}, () =>
      alternating({
        sides: [
          { name: "ingest", origin: ingestUrl, pids, concurrency: sweepTrack.concurrency },
          { name: "bare", origin: bareUrl, pids: { bare: bare.child.pid }, concurrency: sweepBare.concurrency },
        ],
        path: "/v1/track", body: () => trackEvent(nextMessageId()),
        warmupMs: P.warmupMs, slices, sliceMs: TRACK_SLICE_MS, settleMs: TRACK_SETTLE_MS,
      }),
    );
    const { ingest: pt, bare: pb } = peaks.result as { ingest: SideTotals; bare: SideTotals };
    const peaksStored = (await streamCount(jsm, EVENTS_STREAM)) - beforePeaks;
    const track = { concurrency: sweepTrack.concurrency, perSecond: sideRate(pt), check: peaksStored === pt.totalOkEvents };
    const bareRun = { concurrency: sweepBare.concurrency, perSecond: sideRate(pb) };
    log(`    ingest: ${fmt(track.perSecond)} requests/s (CPU ${cpuText(cpuShare(pt))}); bare: ${fmt(bareRun.perSecond)} requests/s (CPU ${cpuText(cpuShare(pb))})`);
    log(`    stream check: ${fmt(pt.totalOkEvents)} accepted, stream holds ${fmt(peaksStored)} new messages: ${track.check ? "OK" : "MISMATCH"}`);
    const trackMachineUs = sideUs(pt, "bench", "ingest", "nats");
    const trackMaxRate = (cpus().length * 1e6) / trackMachineUs;
    const trackBound = trackMaxRate / bareRun.perSecond;
    log(`    a request costs the machine ${trackMachineUs} us of CPU (load generator, ingest, nats-server): with all ${cpus().length} cores busy, at most ${fmt(trackMaxRate)} requests/s = ${round(trackBound, 3)} of bare Fastify`);
    const bareRssMB = round((procStatusKB(bare.child.pid, "VmHWM") ?? NaN) / 1024, 1);
    log(`    bare server peak RSS ${bareRssMB} MB`);
    await stopChild(bare.child);
    const trackCheck = track.check && trackRuns.every((r) => r.check);

    // 3: latency at half the peak, open loop.
    const rate = Math.max(1, track.perSecond / 2);
    log(`\n[3] /v1/track latency, open loop at ${fmt(rate)} requests/s for ${P.latencyMs / 1000}s ...`);
    const beforeLatency = await streamCount(jsm, EVENTS_STREAM);
    const latency = await ingestPhase("latency", ingestUrl, pids, () => trackOpenLoop({ origin: ingestUrl, path: "/v1/track", rate, durationMs: P.latencyMs, body: () => trackEvent(nextMessageId()) }));
    const latencyStored = (await streamCount(jsm, EVENTS_STREAM)) - beforeLatency;
    const l = latency.result;
    log(`    achieved ${fmt(l.achievedRate)}/s; p50 ${l.fromSchedule.p50} ms, p90 ${l.fromSchedule.p90} ms, p99 ${l.fromSchedule.p99} ms, p99.9 ${l.fromSchedule.p999} ms, max ${l.fromSchedule.max} ms; statuses ${JSON.stringify(l.statuses)}`);
    log(`    CPU ${cpuText(latency.cpu)}`);
    log(`    service time (from send): p50 ${l.service.p50} ms, p99 ${l.service.p99} ms; load generator's own event-loop delay p99 ${l.benchLoopDelay.p99} ms, max ${l.benchLoopDelay.max} ms;\n` +
      `    at most ${l.maxInFlight} requests outstanding, on up to ${l.maxConnections} connections`);
    log(`    ingest: ${diagText(latency.ingest)}`);
    log(`    stream check: ${fmt(l.okEvents)} accepted, stream holds ${fmt(latencyStored)} new messages: ${latencyStored === l.okEvents ? "OK" : "MISMATCH"}`);

    // 4: RSS, read before the ingest stops.
    clearInterval(rssTimer);
    const hwmKB = procStatusKB(ingest.pid, "VmHWM") ?? NaN;
    rss.maxKB = Math.max(rss.maxKB, procStatusKB(ingest.pid, "VmRSS") ?? 0);
    const rssMB = hwmKB / 1024;

    await stopChild(ingest);
    const profile = keepProfile("ingest", profDir, phaseWindows, /\/dist\/|@nats-io/);

    // Report.
    const batchRatio = batch.result.eventsPerSecond / raw.eventsPerSecond;
    const trackRatio = track.perSecond / bareRun.perSecond;
    const rows: Array<[string, string, string, string]> = [
      ["A  raw JetStream publish (1 process, window)", `${fmt(raw.eventsPerSecond)} events/s`, "", ""],
      ["   ingest POST /v1/batch", `${fmt(batch.result.eventsPerSecond)} events/s`, "", ""],
      ["   batch / A", round(batchRatio, 3).toFixed(3), `>= ${TARGETS.batchRatio.toFixed(1)}`, verdict(batchRatio >= TARGETS.batchRatio)],
      ["   batch stream check", `${fmt(batchStored)} / ${fmt(batch.result.totalOkEvents)}`, "equal", verdict(batchCheck)],
      ...bareRuns.map((b, i): [string, string, string, string] => [`${i === 0 ? "B" : " "}  bare Fastify POST, ${b.concurrency} concurrent`, `${fmt(b.perSecond)} req/s`, "", ""]),
      ...trackRuns.map((t, i): [string, string, string, string] => [`   ingest POST /v1/track, ${t.concurrency} concurrent`, `${fmt(t.perSecond)} req/s`, `(${round(t.perSecond / bareRuns[i]!.perSecond, 3).toFixed(3)} of B there)`, ""]),
      [`   ingest at ${track.concurrency} / bare at ${bareRun.concurrency}, head to head`, `${fmt(track.perSecond)} / ${fmt(bareRun.perSecond)}`, "", ""],
      [`   track / B, each at its peak (${track.concurrency} / ${bareRun.concurrency})`, round(trackRatio, 3).toFixed(3), `>= ${TARGETS.trackRatio.toFixed(1)}`, verdict(trackRatio >= TARGETS.trackRatio)],
      ["   track / B if every core were busy (the bound)", round(trackBound, 3).toFixed(3), "", ""],
      ["   track stream checks", `${fmt(trackRuns.reduce((a, r) => a + r.stored, 0) + peaksStored)} / ${fmt(trackRuns.reduce((a, r) => a + r.okEvents, 0) + pt.totalOkEvents)}`, "equal", verdict(trackCheck)],
      [`   /v1/track p50 @ ${fmt(l.achievedRate)}/s`, `${l.fromSchedule.p50} ms`, "", ""],
      [`   /v1/track p99 @ ${fmt(l.achievedRate)}/s`, `${l.fromSchedule.p99} ms`, "", ""],
      ["   ingest peak RSS (VmHWM)", `${rssMB.toFixed(1)} MB`, `< ${TARGETS.rssMB} MB`, verdict(rssMB < TARGETS.rssMB)],
    ];
    printTable(rows);
    log(`  (sampled VmRSS max ${(rss.maxKB / 1024).toFixed(1)} MB)`);

    if (profile) printProfile("CPU profile of the ingest (bench/results/ingest-latest.cpuprofile)", profile, "trackhook and NATS client");

    const results = {
      date: new Date().toISOString(),
      commit: gitCommit(),
      machine: { cpus: cpus().length, model: cpus()[0]?.model, node: process.version, loadavgAtStart: round(load, 2), busyPctAtStart: busyPct },
      params: { ...P, eventBytes: EVENT_BYTES },
      raw: { eventsPerSecond: round(raw.eventsPerSecond, 0), published: raw.published, stored: raw.stored, failures: raw.failures, cpuPct: raw.cpu, publisherCpuUsPerEvent: raw.cpuUsPerEvent },
      batch: { eventsPerSecond: round(batch.result.eventsPerSecond, 0), requestsPerSecond: round(batch.result.perSecond, 0), statuses: batch.result.statuses, sentEvents: batch.result.totalOkEvents, storedEvents: batchStored, streamCheck: batchCheck, cpuPct: batch.cpu, ingestCpuUsPerEvent: batchUs, ingest: batch.ingest },
      track: {
        requestsPerSecond: round(track.perSecond, 0), atConcurrency: track.concurrency, streamCheck: trackCheck,
        runs: trackRuns.map((r) => ({ concurrency: r.concurrency, requestsPerSecond: round(r.perSecond, 0), statuses: r.statuses, sentEvents: r.okEvents, storedEvents: r.stored, streamCheck: r.check, cpuPct: r.cpu, ingestCpuUsPerRequest: r.us, ingest: r.ingest })),
      },
      bareFastify: {
        requestsPerSecond: round(bareRun.perSecond, 0), atConcurrency: bareRun.concurrency, peakRssMB: bareRssMB,
        runs: bareRuns.map((r) => ({ concurrency: r.concurrency, requestsPerSecond: round(r.perSecond, 0), statuses: r.statuses, cpuPct: r.cpu, cpuUsPerRequest: r.us })),
      },
      latency: { ...l, storedEvents: latencyStored, cpuPct: latency.cpu, ingest: latency.ingest },
      rss: { peakMB: round(rssMB, 1), sampledMaxMB: round(rss.maxKB / 1024, 1) },
      ratios: {
        batchOverRaw: round(batchRatio, 3),
        trackPeakOverBarePeak: round(trackRatio, 3),
        /** At most, on this machine: cores / (CPU µs per request of load generator, ingest and nats-server) / bare Fastify's rate. */
        trackBoundOnAllCores: round(trackBound, 3),
        trackMachineCpuUsPerRequest: trackMachineUs,
        /** The same from the sweep, where the two peaks were measured at different moments. */
        sweepTrackPeakOverBarePeak: round(sweepTrack.perSecond / sweepBare.perSecond, 3),
        trackOverBareAtConcurrency: Object.fromEntries(trackRuns.map((t, i) => [t.concurrency, round(t.perSecond / bareRuns[i]!.perSecond, 3)])),
      },
      targets: {
        batchRatio: { target: TARGETS.batchRatio, met: batchRatio >= TARGETS.batchRatio },
        trackRatio: { target: TARGETS.trackRatio, met: trackRatio >= TARGETS.trackRatio },
        rssMB: { target: TARGETS.rssMB, met: rssMB < TARGETS.rssMB },
      },
      ...(profile ? { profile } : {}),
    };
    writeResults("ingest", results);
  } finally {
    clearInterval(rssTimer);
    await nc.close().catch(() => {});
  }
}

await runBench(main);
