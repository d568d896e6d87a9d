// Helpers for the benchmarks (bench/delivery.ts, bench/ingest.ts):
// process accounting from /proc, CPU per phase, the quiet-machine wait, child processes that are
// cleaned up however the bench ends, percentiles, report formatting and CPU-profile summaries.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { LocalNatsServer } from "../dataplane/nats/mod.ts";

import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { JetStreamManager } from "@nats-io/jetstream";

export const ROOT = fileURLToPath(new URL("..", import.meta.url));
const RESULTS_DIR = join(ROOT, "bench", "results");

/**
 * Milliseconds on the machine's monotonic clock (CLOCK_MONOTONIC), one clock for every process of
 * the machine, for times compared between processes. Not `performance.timeOrigin + now()`: each
 * process fixes its timeOrigin from the wall clock when it starts, and two processes' can differ:
 * in one run, every arrival at the receiver read 4–28 ms before the bench had sent its request.
 */
export const sharedClockMs = () => Number(process.hrtime.bigint()) / 1e6;

// ---------------------------------------------------------------------------------------------
// Process accounting from /proc.

const CLK_TCK = 100; // `getconf CLK_TCK`: 100 on Linux

function cpuTicks(pid: number | undefined): number | undefined {
  if (!pid) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]); // utime + stime
  } catch {
    return undefined;
  }
}

export function procStatusKB(pid: number | undefined, field: "VmRSS" | "VmHWM" | "RssAnon" | "RssFile"): number | undefined {
  if (!pid) return undefined;
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** Busy jiffies of the whole machine (all cores), from /proc/stat. */
function hostBusyTicks(): number | undefined {
  try {
    const fields = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
    return total - (fields[3] ?? 0) - (fields[4] ?? 0); // minus idle and iowait
  } catch {
    return undefined;
  }
}

export type Pids = Record<string, number | undefined>;
export type CpuShare = Record<string, number>;

/**
 * CPU use (% of one core) of each process over a phase; "bench" is this process, "other" is what
 * the rest of the machine used meanwhile (anything else running skews the figures).
 */
export async function withCpu<T>(pids: Pids, run: () => Promise<T>): Promise<{ result: T; cpu: CpuShare; seconds: number }> {
  const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuTicks(pid)]));
  const hostBefore = hostBusyTicks();
  const ownBefore = process.cpuUsage();
  const t0 = performance.now();
  const result = await run();
  const seconds = (performance.now() - t0) / 1000;
  const own = process.cpuUsage(ownBefore);
  const cpu: CpuShare = { bench: round(((own.user + own.system) / 1e6 / seconds) * 100, 0) };
  for (const [name, pid] of Object.entries(pids)) {
    const a = before[name];
    const b = cpuTicks(pid);
    if (a !== undefined && b !== undefined) cpu[name] = round(((b - a) / CLK_TCK / seconds) * 100, 0);
  }
  const hostAfter = hostBusyTicks();
  if (hostBefore !== undefined && hostAfter !== undefined) {
    const host = ((hostAfter - hostBefore) / CLK_TCK / seconds) * 100;
    const ours = Object.values(cpu).reduce((a, b) => a + b, 0);
    cpu.other = Math.max(0, round(host - ours, 0));
  }
  return { result, cpu, seconds };
}

/** CPU microseconds a process spent per item over a phase. */
export const usPer = (cpuPct: number | undefined, seconds: number, items: number) => round((((cpuPct ?? NaN) / 100) * seconds * 1e6) / items, 1);

/**
 * On a shared machine, waits (at most `waitS` seconds) for whatever else is running to finish:
 * until the machine is under `busyPct` CPU over one second.
 */
export async function waitForQuiet(waitS: number, busyLimitPct: number, onlyIfBusy = false): Promise<{ busyPct: number; load: number }> {
  const load = loadavg()[0]!;
  let busyPct = NaN;
  for (let waited = 0; waited < waitS; waited++) {
    const busy0 = hostBusyTicks();
    await sleep(1000);
    busyPct = busy0 === undefined ? NaN : round((((hostBusyTicks() ?? busy0) - busy0) / CLK_TCK) * 100, 0);
    if (!(busyPct > busyLimitPct)) break;
    if (waited === 0) log(`  machine busy (${busyPct}% CPU): waiting up to ${waitS}s for it to calm down ...`);
  }
  if (onlyIfBusy && !(busyPct > busyLimitPct)) return { busyPct, load };
  log(
    `  machine ${onlyIfBusy ? "now" : "before start"}: ${busyPct}% CPU busy (of ${cpus().length * 100}%), load average ${load.toFixed(2)}` +
      `${busyPct > busyLimitPct ? ' -- something else is running: figures will be noisy (see "other" CPU per phase)' : ""}`,
  );
  return { busyPct, load };
}

// ---------------------------------------------------------------------------------------------
// Child processes, stopped and their temp dirs removed by cleanup().

const children = new Set<ChildProcess>();
const natsServers: LocalNatsServer[] = [];
const tempDirs: string[] = [];

export async function startNats(prefix: string): Promise<LocalNatsServer> {
  const server = await LocalNatsServer.start({ storeDir: tempDir(prefix) });
  natsServers.push(server);
  return server;
}

export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

/** The node flags the CLI ships in its shebang (`#!/usr/bin/env -S node <flags>`), so the bench runs it as users do. */
export function shippedNodeFlags(cli: string): string[] {
  return /^#!\/usr\/bin\/env -S node(.*)$/.exec(readFileSync(cli, "utf8").split("\n", 1)[0]!)?.[1]!.trim().split(/\s+/).filter(Boolean) ?? [];
}

/**
 * Spawns a process and resolves once a stdout line matches `ready`; keeps the last lines for
 * errors. With `ipc`, the child also gets an IPC channel (child.send / process.send).
 */
export async function spawnUntil(
  command: string,
  args: string[],
  ready: RegExp,
  opts: { timeoutMs?: number; ipc?: boolean } = {},
): Promise<{ child: ChildProcess; match: RegExpExecArray; tail: string[] }> {
  const timeoutMs = opts.timeoutMs ?? 20_000;
  const child = spawn(command, args, { cwd: ROOT, stdio: opts.ipc ? ["ignore", "pipe", "pipe", "ipc"] : ["ignore", "pipe", "pipe"] });
  children.add(child);
  child.once("exit", () => children.delete(child));
  const tail: string[] = [];
  const keep = (line: string) => {
    tail.push(line);
    if (tail.length > 50) tail.shift();
  };
  const match = await new Promise<RegExpExecArray>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command} ${args.join(" ")} not ready after ${timeoutMs} ms:\n${tail.join("\n")}`)), timeoutMs);
    let buffered = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      let newline: number;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        keep(line);
        const m = ready.exec(line);
        if (m) {
          clearTimeout(timer);
          resolve(m);
        }
      }
    });
    child.stderr!.on("data", (chunk: Buffer) => chunk.toString().split("\n").filter(Boolean).forEach(keep));
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited before it was ready (code ${code}, signal ${signal}):\n${tail.join("\n")}`));
    });
  });
  return { child, match, tail };
}

export async function stopChild(child: ChildProcess, timeoutMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGCONT"); // in case the bench paused it
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  await exited;
  clearTimeout(timer);
}

async function cleanup(): Promise<void> {
  for (const child of [...children]) await stopChild(child).catch(() => {});
  for (const server of natsServers) await server.stop().catch(() => {});
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
}

/** Runs the bench's main(): exit 0 after cleanup, 1 with the error; Ctrl-C cleans up too. */
export async function runBench(main: () => Promise<void>): Promise<never> {
  process.once("SIGINT", () => {
    void cleanup().then(() => process.exit(130));
  });
  try {
    await main();
    await cleanup();
    process.exit(0);
  } catch (err) {
    process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    await cleanup();
    process.exit(1);
  }
}

// ---------------------------------------------------------------------------------------------
// Statistics and report helpers.

export interface Percentiles {
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
}

export function percentiles(values: number[]): Percentiles {
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : NaN);
  return { p50: round(at(0.5), 2), p90: round(at(0.9), 2), p99: round(at(0.99), 2), p999: round(at(0.999), 2), max: round(sorted.at(-1) ?? NaN, 2) };
}

export function round(n: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
export const fmt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "n/a");
export const cpuText = (cpu: CpuShare) => Object.entries(cpu).map(([k, v]) => `${k} ${v}%`).join(", ");
export const verdict = (ok: boolean) => (ok ? "PASS" : "MISS");

export function log(line: string) {
  process.stdout.write(`${line}\n`);
}

/** Prints rows of [measure, value, target, verdict] as an aligned table. */
export function printTable(rows: Array<[string, string, string, string]>): void {
  const head: [string, string, string, string] = ["measure", "value", "target", ""];
  const w = [0, 1, 2, 3].map((i) => Math.max(...[head, ...rows].map((r) => r[i]!.length)));
  const line = (r: string[]) => `  ${r[0]!.padEnd(w[0]!)}  ${r[1]!.padStart(w[1]!)}  ${r[2]!.padEnd(w[2]!)}  ${r[3]}`;
  log(`\n${line(head)}\n  ${"-".repeat(w[0]! + w[1]! + w[2]! + 10)}`);
  for (const r of rows) log(line(r));
}

export function gitCommit(): string | undefined {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// CPU profile summary (--cpu-prof of a child process).

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

export interface ProfileSummary {
  phase: string;
  /** CPU time sampled in the phase (idle excluded), ms. */
  sampledMs: number;
  byPackage: Array<{ pkg: string; selfPct: number }>;
  topSelf: Array<{ frame: string; selfPct: number }>;
  /** Inclusive time of the frames matching `inclusive`: which step of the work costs what. */
  topTotal: Array<{ frame: string; totalPct: number }>;
}

/** A phase as a window of CLOCK_MONOTONIC microseconds, the clock of V8's profiler timestamps. */
export interface PhaseWindow {
  phase: string;
  fromUs: number;
  toUs: number;
}

export const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

function frameKey(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const name = functionName || "(anonymous)";
  if (!url) return name;
  const short = url.replace(/^file:\/\//, "").replace(ROOT, "").replace(/^.*node_modules\//, "");
  return `${name} ${short}:${lineNumber + 1}`;
}

function packageOf(node: ProfileNode): string {
  const url = node.callFrame.url.replace(/^file:\/\//, "");
  if (!url) return node.callFrame.functionName || "(native)";
  if (url.startsWith("node:")) return url.replace(/^node:(internal\/)?/, "node:").split("/").slice(0, 2).join("/");
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.includes("/dist/")) return `trackhook:${url.slice(url.indexOf("/dist/") + 6)}`;
  return url;
}

/** Self time by package and frame, and inclusive time of the frames whose URL matches `inclusive`, per phase. */
function summarizeProfile(file: string, windows: PhaseWindow[], inclusive: RegExp): ProfileSummary[] {
  const profile = JSON.parse(readFileSync(file, "utf8")) as { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[]; startTime: number };
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const acc = windows.map((w) => ({ w, all: 0, self: new Map<string, number>(), total: new Map<string, number>(), pkgs: new Map<string, number>() }));
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  let t = profile.startTime;
  profile.samples.forEach((id, i) => {
    const dt = Math.max(0, profile.timeDeltas[i] ?? 0);
    t += dt;
    const node = byId.get(id);
    const a = acc.find(({ w }) => t >= w.fromUs && t < w.toUs);
    if (!a || !node || node.callFrame.functionName === "(idle)") return;
    a.all += dt;
    add(a.self, frameKey(node), dt);
    add(a.pkgs, packageOf(node), dt);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const n = byId.get(cur)!;
      if (!inclusive.test(n.callFrame.url)) continue;
      const k = frameKey(n);
      if (!seen.has(k)) add(a.total, k, dt);
      seen.add(k);
    }
  });
  const top = (m: Map<string, number>, n: number) => [...m.entries()].sort((x, y) => y[1] - x[1]).slice(0, n);
  return acc.map(({ w, all, self, total, pkgs }) => {
    const pct = (v: number) => round((v / Math.max(1, all)) * 100, 1);
    return {
      phase: w.phase,
      sampledMs: round(all / 1000, 0),
      byPackage: top(pkgs, 12).map(([pkg, v]) => ({ pkg, selfPct: pct(v) })),
      topSelf: top(self, 20).map(([frame, v]) => ({ frame, selfPct: pct(v) })),
      topTotal: top(total, 20).map(([frame, v]) => ({ frame, totalPct: pct(v) })),
    };
  });
}

/** `inclusiveFrames` names what the `inclusive` pattern given to summarizeProfile matched, for the heading of the inclusive list. */
export function printProfile(title: string, profile: ProfileSummary[], inclusiveFrames = "trackhook, NATS client and undici"): void {
  log(`\n${title}, by phase:`);
  for (const ph of profile) {
    log(`\n  [${ph.phase}] ${fmt(ph.sampledMs)} ms of CPU sampled. Self time by package:`);
    log(`    ${ph.byPackage.map((p) => `${p.pkg} ${p.selfPct}%`).join(", ")}`);
    log("  top frames by self time:");
    for (const f of ph.topSelf.slice(0, 15)) log(`    ${f.selfPct.toFixed(1).padStart(5)}%  ${f.frame}`);
    log(`  ${inclusiveFrames} frames by total (inclusive) time:`);
    for (const f of ph.topTotal.slice(0, 15)) log(`    ${f.totalPct.toFixed(1).padStart(5)}%  ${f.frame}`);
  }
}

// ---------------------------------------------------------------------------------------------
// A component's own /metrics, scraped around a phase.

export type Samples = Map<string, number>;

export async function scrape(origin: string): Promise<Samples> {
  const samples: Samples = new Map();
  try {
    const text = await (await fetch(`${origin}/metrics`)).text();
    for (const line of text.split("\n")) {
      if (!line || line.startsWith("#")) continue;
      const space = line.lastIndexOf(" ");
      samples.set(line.slice(0, space), Number(line.slice(space + 1)));
    }
  } catch {
    // diagnostics only
  }
  return samples;
}

/** The upper bound (ms) of the bucket of histogram `name` holding quantile q of a phase's observations. */
export function bucketQuantile(name: string, before: Samples, after: Samples, q: number): number {
  const buckets: Array<[number, number]> = [];
  const pattern = new RegExp(`^${name}_bucket\\{.*le="([^"]+)".*\\}$`);
  for (const [key, value] of after) {
    const m = pattern.exec(key);
    if (m) buckets.push([m[1] === "+Inf" ? Infinity : Number(m[1]), value - (before.get(key) ?? 0)]);
  }
  buckets.sort((a, b) => a[0] - b[0]);
  const total = buckets.at(-1)?.[1] ?? 0;
  const hit = buckets.find(([, count]) => count >= q * total);
  return hit ? hit[0] * 1000 : NaN;
}

/** prom-client's eventLoopMonitoringPrecision default: delays below it are not measured. */
export const LOOP_RESOLUTION_MS = 10;

// ---------------------------------------------------------------------------------------------
// The load: ~300-byte track events with unique messageIds, and the NATS side of the checks.

const RUN = Math.random().toString(36).slice(2, 8);
let sequence = 0;

export function nextMessageId(): string {
  return `bench-${RUN}-${(sequence++).toString(36).padStart(8, "0")}`;
}

/** One track event as JSON text (string templating: the load generator must stay cheap). */
export function trackEvent(messageId: string): string {
  const n = sequence % 100_000;
  return (
    `{"type":"track","event":"Order Completed","userId":"user-${n}","messageId":"${messageId}",` +
    `"timestamp":"2026-01-15T10:00:00.000Z","properties":{"orderId":"order-${n}","revenue":42.5,` +
    `"currency":"EUR","products":3},"context":{"library":{"name":"analytics-node",` +
    `"version":"3.1.0"},"ip":"203.0.113.7"}}`
  );
}

export async function natsConnect(url: string): Promise<NatsConnection> {
  return connect({ servers: url, noAsyncTraces: true, maxReconnectAttempts: 10 });
}

/** Messages in a stream; NaN when it cannot be read. */
export async function streamCount(jsm: JetStreamManager, stream: string): Promise<number> {
  return (await jsm.streams.info(stream).catch(() => undefined))?.state.messages ?? NaN;
}

/** A parsed flag that must be a positive number. */
export function positiveFlag(flags: Record<string, unknown>, name: string): number {
  const n = Number(flags[name]);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number`);
  return n;
}

/** Writes bench/results/<name>-latest.json and says where. */
export function writeResults(name: string, results: unknown): void {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const out = join(RESULTS_DIR, `${name}-latest.json`);
  writeFileSync(out, `${JSON.stringify(results, null, 2)}\n`);
  log(`\nwrote ${out}`);
}

/** Keeps the process's CPU profile as bench/results/<name>-latest.cpuprofile and summarises it by phase. */
export function keepProfile(name: string, profDir: string | undefined, windows: PhaseWindow[], ours: RegExp): ProfileSummary[] | undefined {
  const file = profDir ? readdirSync(profDir).find((f) => f.endsWith(".cpuprofile")) : undefined;
  if (!profDir || !file) return undefined;
  mkdirSync(RESULTS_DIR, { recursive: true });
  const kept = join(RESULTS_DIR, `${name}-latest.cpuprofile`);
  copyFileSync(join(profDir, file), kept);
  return summarizeProfile(kept, windows, ours);
}

/** What an open-loop run measured of itself: how fast it really sent and whether it kept up. */
export interface OpenLoopRun {
  sent: number;
  achievedRate: number;
  /** This process's own event-loop delay, ms: high values would mean the load generator, not the server, adds latency. */
  benchLoopDelay: { p99: number; max: number };
  /** Most requests outstanding at once. */
  maxInFlight: number;
}

/**
 * Open loop: request i is due at start + i/rate whatever happened to the others (no coordinated
 * omission). `send` gets its scheduled time and returns a promise that settles when the request is
 * done; the run ends when every one has.
 */
export async function openLoop(rate: number, durationMs: number, send: (scheduled: number) => Promise<unknown>): Promise<OpenLoopRun> {
  const interval = 1000 / rate;
  const total = Math.max(1, Math.floor((rate * durationMs) / 1000));
  const inFlight = new Set<Promise<unknown>>();
  let maxInFlight = 0;
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  const start = performance.now() + 20;
  let next = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (next < total && start + next * interval <= now) {
        const p: Promise<unknown> = send(start + next++ * interval).finally(() => inFlight.delete(p));
        inFlight.add(p);
        if (inFlight.size > maxInFlight) maxInFlight = inFlight.size;
      }
      if (next >= total) return resolve();
      setTimeout(tick, Math.max(0, start + next * interval - performance.now()));
    };
    setTimeout(tick, 20);
  });
  const lastScheduled = start + (total - 1) * interval;
  await Promise.all(inFlight);
  loop.disable();
  return {
    sent: total,
    achievedRate: round(total / ((lastScheduled - start + interval) / 1000), 0),
    // The histogram counts the 1 ms sampling interval in every value.
    benchLoopDelay: { p99: round(Math.max(0, loop.percentile(99) / 1e6 - 1), 2), max: round(Math.max(0, loop.max / 1e6 - 1), 2) },
    maxInFlight,
  };
}
