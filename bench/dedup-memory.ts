// Measures what the stream's duplicate window costs in nats-server memory: the same number of
// messages with unique Nats-Msg-Ids is published into a stream whose window holds them all, and
// into one whose window (100ms) holds almost none; the difference in server RSS per message is
// the cost of one window entry. Not a test: prints a report. Usage: node bench/dedup-memory.ts [count]
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { LocalNatsServer, ensureStream, eventsStreamConfig, eventMsgId } from "../dataplane/nats/mod.ts";

const COUNT = Number(process.argv[2] ?? 300_000);
const WINDOW = 64;

function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

async function measure(duplicateWindowMs: number): Promise<number> {
  const storeDir = mkdtempSync(join(tmpdir(), "trackhook-dedup-"));
  const server = await LocalNatsServer.start({ storeDir });
  const nc = await connect({ servers: server.url, noAsyncTraces: true });
  try {
    const jsm = await jetstreamManager(nc);
    await ensureStream(jsm, eventsStreamConfig({ maxAgeMs: 3_600_000, maxBytes: 4 * 1024 ** 3, duplicateWindowMs, replicas: 1 }));
    const js = jetstream(nc);
    const body = JSON.stringify({ type: "track", event: "x".repeat(200) });
    const before = rssBytes(server.pid!);
    let inFlight: Promise<unknown>[] = [];
    for (let i = 0; i < COUNT; i++) {
      // A realistic id: analytics-node's "node-next-<ms>-<uuid>" is ~60 bytes.
      const messageId = `node-next-${Date.now()}-${crypto.randomUUID()}`;
      inFlight.push(js.publish("trackhook.events.default.web.track", body, { msgID: eventMsgId("default", "web", messageId) }));
      if (inFlight.length >= WINDOW) {
        await Promise.all(inFlight);
        inFlight = [];
      }
    }
    await Promise.all(inFlight);
    await new Promise((r) => setTimeout(r, 500));
    return rssBytes(server.pid!) - before;
  } finally {
    await nc.close();
    await server.stop();
    rmSync(storeDir, { recursive: true, force: true });
  }
}

const withWindow = await measure(3_600_000);
const without = await measure(100);
const perEntry = (withWindow - without) / COUNT;
console.log(`messages per run:                   ${COUNT}`);
console.log(`server RSS growth, 1h window:       ${(withWindow / 1024 ** 2).toFixed(1)} MiB`);
console.log(`server RSS growth, 100ms window:    ${(without / 1024 ** 2).toFixed(1)} MiB`);
console.log(`cost per message in the window:     ${perEntry.toFixed(0)} bytes (ids of ~73 bytes: <ns>/<source>/<messageId>)`);
for (const [rate, window] of [[100, 600], [1000, 600], [1000, 3600], [5000, 600]] as const) {
  console.log(`  ${rate} msg/s x ${window / 60} min window ≈ ${((rate * window * perEntry) / 1024 ** 2).toFixed(0)} MiB per replica`);
}
