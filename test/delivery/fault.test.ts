// Fault test (issue 3): the delivery process is SIGKILLed in the middle of a run while messages
// keep arriving, then restarted with the same arguments. Afterwards every message the ingest
// accepted was delivered at least once or is in the dead-letter queue: none is lost. Duplicates
// are allowed (at-least-once) and counted; every copy of a message carries the same delivery id.
import { spawn, type ChildProcess } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DLQ_STREAM, EVENTS_STREAM, consumerName, dlqSubject, readStored, streamLastSeq } from "../../dataplane/nats/mod.ts";
import { basic, configFromYaml, startIngest, type IngestHarness } from "../harness/ingest.ts";
import { randomName, startNats, type NatsHarness } from "../harness/nats.ts";
import { startReceiver, type Receiver } from "../harness/receiver.ts";
import { tempDir } from "../harness/temp.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const CLI = join(root, "cli/main.ts");

const RUN = randomName("dfault");
const WRITE_KEY = `key-${RUN}`;
const DESTINATION = "fault";
const HOOK = "/hook";
/** Messages sent: the first part while delivery runs (and through the kill), the rest once the restart has begun. */
const EARLY = 300;
const LATE = 150;

let nats: NatsHarness;
let ingest: IngestHarness;
let receiver: Receiver;
let configDir: string;
const children = new Set<ChildProcess>();

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls until `check` is true; fails after `timeoutMs` with `what` and the state `describe` gives. */
async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs: number, describeState = () => ""): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} ${describeState()}`);
    await sleep(50);
  }
}

interface Deliverer {
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** `trackhook deliver` as its own process; resolves once its destination's worker is delivering. */
async function startDeliver(): Promise<Deliverer> {
  const child = spawn(process.execPath, [CLI, "deliver", "--config", configDir, "--nats", nats.server.url, "--allow-private-networks", "--log-level", "info", "--host", "127.0.0.1", "--port", "0"], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let output = "";
  // Keep only the tail: enough to explain a failure, never a growing buffer.
  const keep = (c: Buffer) => (output = (output + c.toString()).slice(-20_000));
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("exit", (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    }),
  );
  let gone = false;
  void exited.then(() => (gone = true));
  await until(
    "trackhook deliver to start delivering",
    () => {
      if (gone) throw new Error(`trackhook deliver exited during start:\n${output}`);
      return /"msg":"delivering"/.test(output);
    },
    20_000,
    () => `\n${output}`,
  );
  return { child, output: () => output, exited };
}

/** Stops a process we started: SIGTERM, then SIGKILL if it has not exited within `graceMs`. */
async function stopChild(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

beforeAll(async () => {
  receiver = await startReceiver();
  // Answers 200 after 0-30 ms, so some deliveries are always in flight when the kill comes.
  receiver.on(HOOK, (_req, _n, res) => void setTimeout(() => res.writeHead(200).end("ok"), Math.random() * 30));
  const yaml = `
apiVersion: v1
kind: Secret
metadata: { name: ${DESTINATION}-keys }
stringData: { writeKey: ${WRITE_KEY} }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: ${DESTINATION} }
spec: { writeKeySecretRef: { name: ${DESTINATION}-keys, key: writeKey } }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: ${DESTINATION} }
spec:
  sources: [${DESTINATION}]
  urls: ["${receiver.url(HOOK)}"]
  # ack_wait = timeout + 30 s: a message in flight at the kill comes back after 31 s.
  timeout: 1s
`;
  configDir = tempDir("deliver-fault");
  writeFileSync(join(configDir, "config.yaml"), yaml);
  nats = await startNats();
  ingest = await startIngest(nats, { config: configFromYaml(yaml) });
});

afterAll(async () => {
  await Promise.all([...children].map((c) => stopChild(c)));
  await receiver?.close();
  await ingest?.close();
  await nats?.stop();
  if (configDir) rmSync(configDir, { recursive: true, force: true });
});

interface Sent {
  id: string;
  status: number;
}

async function sendOne(id: string): Promise<Sent> {
  try {
    const res = await fetch(`${ingest.url}/v1/track`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: basic(WRITE_KEY) },
      body: JSON.stringify({ userId: `user-${RUN}`, event: "Delivery Fault", messageId: id, properties: { id } }),
      signal: AbortSignal.timeout(15_000),
    });
    await res.arrayBuffer();
    return { id, status: res.status };
  } catch {
    return { id, status: 0 };
  }
}

/** Sends every id with `concurrency` clients, pausing `pauseMs` after each request. */
async function sendAll(ids: string[], concurrency: number, pauseMs: number, record: (s: Sent) => void): Promise<void> {
  let next = 0;
  const client = async () => {
    while (next < ids.length) {
      record(await sendOne(ids[next++]!));
      if (pauseMs) await sleep(pauseMs);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
}

/** messageId -> the x-delivery-id header of every request that carried it. */
function received(): Map<string, string[]> {
  const byId = new Map<string, string[]>();
  for (const r of receiver.requests(HOOK)) {
    const id = (JSON.parse(r.body.toString()) as { messageId: string }).messageId;
    const ids = byId.get(id) ?? [];
    ids.push(String(r.headers["x-delivery-id"]));
    byId.set(id, ids);
  }
  return byId;
}

async function deadLettered(): Promise<Set<string>> {
  const out = new Set<string>();
  if ((await streamLastSeq(nats.jsm, DLQ_STREAM)) === undefined) return out;
  for await (const m of readStored(nats.js, DLQ_STREAM, dlqSubject("default", DESTINATION), { whole: true })) out.add(m.json<{ messageId: string }>().messageId);
  return out;
}

describe("trackhook deliver SIGKILLed mid-run", () => {
  it("loses nothing: after a restart every accepted message is delivered (at least once) or dead-lettered", { timeout: 90_000 }, async () => {
    const started = Date.now();
    let deliverer = await startDeliver();
    const consumer = consumerName("default", DESTINATION);
    // The consumer delivers what arrives after its creation, so it must exist before traffic starts.
    await nats.jsm.consumers.info(EVENTS_STREAM, consumer);

    const early = Array.from({ length: EARLY }, (_, i) => `${RUN}-early-${i}`);
    const late = Array.from({ length: LATE }, (_, i) => `${RUN}-late-${i}`);
    const sent: Sent[] = [];
    const record = (s: Sent) => sent.push(s);

    let releaseLate!: () => void;
    const restartBegun = new Promise<void>((r) => (releaseLate = r));
    const traffic = (async () => {
      const earlyDone = sendAll(early, 4, 5, record);
      await restartBegun;
      await Promise.all([earlyDone, sendAll(late, 2, 5, record)]);
    })();

    // Kill while messages are arriving and being delivered.
    await until("deliveries before the kill", () => receiver.requests(HOOK).length >= 80, 20_000, () => `(${receiver.requests(HOOK).length} received, ${sent.length} sent: ${sent.filter((x) => x.status === 200).length} accepted)\n${deliverer.output()}`);
    deliverer.child.kill("SIGKILL");
    const killed = await deliverer.exited;
    const killedAt = Date.now();
    const sentAtKill = sent.length;
    const receivedAtKill = receiver.requests(HOOK).length;
    expect(killed.signal).toBe("SIGKILL");

    // Down for a moment while the ingest keeps accepting, then the same command again.
    await sleep(500);
    const restarting = startDeliver();
    releaseLate();
    deliverer = await restarting;
    await traffic;

    const accepted = sent.filter((s) => s.status === 200).map((s) => s.id);
    const refused = sent.filter((s) => s.status !== 200);
    expect(sent).toHaveLength(EARLY + LATE);
    // Nothing was wrong with the ingest or nats-server: all (or nearly all) messages must be accepted.
    expect(accepted.length).toBeGreaterThanOrEqual(0.9 * (EARLY + LATE));

    // Done when every accepted message reached the receiver or the DLQ, and the consumer has nothing
    // left to deliver or to ack (messages in flight at the kill come back after ack_wait, 31 s).
    const accountedFor = async () => {
      const seen = received();
      const dlq = await deadLettered();
      return accepted.filter((id) => !seen.has(id) && !dlq.has(id));
    };
    let missing: string[] = accepted;
    let settled = false;
    await until(
      "every accepted message delivered or dead-lettered, and the consumer drained",
      async () => {
        missing = await accountedFor();
        if (missing.length > 0) return false;
        const info = await nats.jsm.consumers.info(EVENTS_STREAM, consumer);
        settled = info.num_pending === 0 && info.num_ack_pending === 0;
        return settled;
      },
      60_000,
      () => `(${missing.length} missing, e.g. ${missing.slice(0, 5).join(", ")}; consumer drained: ${settled})\n${deliverer.output()}`,
    ).catch((err: unknown) => {
      // Report the precise loss, not just the timeout.
      expect(missing, (err as Error).message).toEqual([]);
      throw err;
    });

    const seen = received();
    const dlq = await deadLettered();
    const duplicates = [...seen.entries()].filter(([, ids]) => ids.length > 1);
    const extraCopies = duplicates.reduce((n, [, ids]) => n + ids.length - 1, 0);
    console.log(
      `delivery fault test: ${EARLY + LATE} sent, ${accepted.length} accepted (${refused.length} refused), ` +
        `SIGKILL after ${sentAtKill} sent / ${receivedAtKill} received; ${seen.size} distinct delivered, ${dlq.size} dead-lettered, ` +
        `0 lost; ${duplicates.length} messages delivered more than once (${extraCopies} extra copies); ` +
        `settled ${((Date.now() - killedAt) / 1000).toFixed(1)} s after the kill, ${((Date.now() - started) / 1000).toFixed(1)} s in all`,
    );

    // None lost (checked above by the wait), nothing delivered that was not sent.
    expect(accepted.filter((id) => !seen.has(id) && !dlq.has(id))).toEqual([]);
    const sentIds = new Set(sent.map((s) => s.id));
    expect([...seen.keys()].filter((id) => !sentIds.has(id))).toEqual([]);
    // Every copy of a message carries the one stable delivery id receivers deduplicate on.
    for (const [id, deliveryIds] of seen) {
      expect(new Set(deliveryIds), id).toEqual(new Set([`default/${DESTINATION}/${DESTINATION}/${id}`])); // the source is named as the destination
    }
    // The restarted process is still running.
    expect(deliverer.child.exitCode).toBeNull();
  });
});
