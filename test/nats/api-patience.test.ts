// Start-up JetStream calls wait out a JetStream that does not answer for a while (a NATS cluster
// just formed or electing), instead of exiting at the client's 5 s API timeout into a crash loop.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { pino } from "pino";
import { spawn } from "node:child_process";
import { DLQ_STREAM, StreamStorageRefusedError, connectNats, dlqStreamConfig, ensureStream, findNatsServer, isSlowJetStream, patiently } from "../../dataplane/nats/mod.ts";
import { freeze, thaw } from "../harness/freeze.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";
import { freePort } from "../harness/ports.ts";

let nats: NatsHarness;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats?.stop();
});

function recordingLog() {
  const lines: string[] = [];
  return { lines, log: { warn: (_fields: object, msg: string) => void lines.push(msg) } };
}

describe("patiently", () => {
  it("makes a stream once JetStream answers again, past the API timeout, and says so once (regression: deliver exited when an R3 stream took over 5 s)", { timeout: 30_000 }, async () => {
    // The connection the processes use (pings every few seconds, reconnects).
    const nc = await connectNats({ servers: nats.server.url, name: "patience-test", log: pino({ level: "silent" }) });
    try {
      const jsm = await jetstreamManager(nc);
      const { lines, log } = recordingLog();
      await freeze(nats.server.pid!); // sockets open, nothing answers
      const made = patiently(`making stream ${DLQ_STREAM}`, () => ensureStream(jsm, dlqStreamConfig({ maxBytes: 64 * 1024 ** 2, replicas: 1 })), log);
      await new Promise((r) => setTimeout(r, 7_000)); // past the 5 s API timeout
      thaw(nats.server.pid!);
      await made;
      expect((await nats.jsm.streams.info(DLQ_STREAM)).config.max_bytes).toBe(64 * 1024 ** 2);
      expect(lines).toEqual([`making stream ${DLQ_STREAM}: JetStream did not answer in time (in a NATS cluster, a leader election or a new replicated stream takes a few seconds); trying again`]);
    } finally {
      thaw(nats.server.pid!);
      await nc.close();
    }
  });

  it("waits out \"no responders\" too: a NATS whose JetStream is not up yet (found by a review: the name nats.js gives it was missed)", async () => {
    const port = await freePort();
    const server = spawn(findNatsServer(), ["-a", "127.0.0.1", "-p", String(port)], { stdio: "ignore" }); // no -js
    try {
      const nc = await connectNats({ servers: `nats://127.0.0.1:${port}`, name: "patience-test", log: pino({ level: "silent" }) });
      try {
        const err = await jetstreamManager(nc).then(() => undefined, (e: unknown) => e);
        expect(err).toBeInstanceOf(Error);
        expect(isSlowJetStream(err)).toBe(true);
      } finally {
        await nc.close();
      }
    } finally {
      server.kill();
    }
  });

  it("throws any other error at once: a stream the server has no room for", async () => {
    const { lines, log } = recordingLog();
    const started = Date.now();
    const tooBig = patiently("making stream", () => ensureStream(nats.jsm, { ...dlqStreamConfig({ maxBytes: 2 ** 60, replicas: 1 }), name: "TOO_BIG" }), log);
    await expect(tooBig).rejects.toBeInstanceOf(StreamStorageRefusedError);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(lines).toEqual([]);
  });

  it("gives up after its patience, with JetStream's own error", { timeout: 20_000 }, async () => {
    const nc = await connectNats({ servers: nats.server.url, name: "patience-test", log: pino({ level: "silent" }) });
    try {
      const jsm = await jetstreamManager(nc);
      await freeze(nats.server.pid!);
      const started = Date.now();
      await expect(patiently("reading", () => jsm.streams.info(DLQ_STREAM), recordingLog().log, 1_000)).rejects.toThrow(/timeout/i);
      expect(Date.now() - started).toBeLessThan(9_000);
    } finally {
      thaw(nats.server.pid!);
      await nc.close();
    }
  });
});
