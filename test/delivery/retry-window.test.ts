// A destination whose retry window is not well within the events stream's max_age could see
// messages expire while still being retried: delivery says so loudly when it starts it, and
// dead-letters them at 90% of max_age instead, before the stream drops them.
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigHolder, compileConfig } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender } from "../../dataplane/delivery/mod.ts";
import { DLQ_STREAM, ensureStream, eventsStreamConfig } from "../../dataplane/nats/mod.ts";
import { DEFAULT_STREAM } from "../harness/ingest.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";
import { answer, startReceiver, type Receiver } from "../harness/receiver.ts";

/** A config of one Source "web" and WebhookDestinations of it (name → the rest of its spec). */
const configOf = (destinations: Record<string, Record<string, unknown>>) =>
  new ConfigHolder(
    compileConfig(
      [
        { apiVersion: "v1", kind: "Secret", metadata: { name: "k" }, stringData: { writeKey: "w" } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name: "web" }, spec: { writeKeySecretRef: { name: "k", key: "writeKey" } } },
        ...Object.entries(destinations).map(([name, spec]) => ({ apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name }, spec: { sources: ["web"], ...spec } })),
      ].map((body, i) => ({ origin: `doc ${i + 1}`, body })),
    ),
  );

let nats: NatsHarness;
beforeAll(async () => {
  nats = await startNats();
  await ensureStream(nats.jsm, eventsStreamConfig(DEFAULT_STREAM)); // max_age 1h
});
afterAll(async () => {
  await nats?.stop();
});

describe("retry window longer than the stream keeps messages", () => {
  it("is reported as an error when the destination starts", async () => {
    const lines: Array<{ msg: string; destination?: string }> = [];
    const log = pino({ level: "warn" }, new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) }));
    const config = configOf({ long: { urls: ["https://hooks.example.com/in"], retryWindow: "2h" }, short: { urls: ["https://hooks.example.com/in"], retryWindow: "30m" } });
    const sender = new WebhookSender({ allowPrivateNetworks: false, userAgent: "test" });
    const service = await DeliveryService.start({ nc: await nats.connect(), config, sender, log, metrics: new DeliveryMetrics({ defaultMetrics: false }) });
    await service.stop();
    await sender.close();
    const warned = lines.filter((l) => l.msg.includes("retryWindow is not well within the events stream's max_age"));
    expect(warned.map((l) => l.destination)).toEqual(["default/long"]);
  });
});

/**
 * A nats-server of its own whose events stream keeps messages `maxAgeMs`, a receiver, and a
 * delivery service for the destinations `destinationsFor` names; `run` gets them, then all stops.
 */
async function withShortStream(
  maxAgeMs: number,
  destinationsFor: (receiver: Receiver) => Record<string, Record<string, unknown>>,
  run: (short: NatsHarness, receiver: Receiver) => Promise<void>,
  options: { streamCheckMs?: number } = {},
): Promise<void> {
  const short = await startNats();
  const receiver = await startReceiver();
  try {
    await ensureStream(short.jsm, eventsStreamConfig({ ...DEFAULT_STREAM, maxAgeMs, duplicateWindowMs: 1_000 }));
    const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "test" });
    const service = await DeliveryService.start({
      nc: await short.connect(), config: configOf(destinationsFor(receiver)), sender, log: pino({ level: "silent" }), metrics: new DeliveryMetrics({ defaultMetrics: false }), ...options,
    });
    try {
      await run(short, receiver);
    } finally {
      await service.stop();
      await sender.close();
    }
  } finally {
    await receiver.close();
    await short.stop();
  }
}

describe("a message whose retry window outlasts the stream", () => {
  it("is dead-lettered before the stream drops it (regression: it vanished, no dead letter)", async () => {
    await withShortStream(6_000, (receiver) => {
      receiver.on("/down", answer(503));
      return { outlasts: { urls: [receiver.url("/down")], retryWindow: "1h" } };
    }, async (short) => {
      const stored = Date.now();
      await short.js.publish("trackhook.events.default.web.track", JSON.stringify({ type: "track", userId: "u", event: "E", messageId: "outlast-1" }), { msgID: "default/web/outlast-1" });
      const deadLetter = await expectDeadLetter(short, 12_000);
      expect(deadLetter.reason).toBe("retry_window_exhausted");
      // 90% of the 6 s max_age, give or take a round.
      expect(deadLetter.at - stored).toBeGreaterThan(4_000);
      expect(deadLetter.at - stored).toBeLessThan(6_000);
    });
  });
});

describe("a stream whose max_age is made shorter while delivery runs", () => {
  it("cuts the retry windows of the running destinations, so a message being retried is dead-lettered before the stream drops it (found by a review: delivery kept the max_age it read at start, and the message vanished)", async () => {
    await withShortStream(3_600_000, (receiver) => {
      receiver.on("/down", answer(503));
      return { outlasts: { urls: [receiver.url("/down")], retryWindow: "1h" } };
    }, async (short) => {
      const stored = Date.now();
      await short.js.publish("trackhook.events.default.web.track", JSON.stringify({ type: "track", userId: "u", event: "E", messageId: "shrunk-1" }), { msgID: "default/web/shrunk-1" });
      // What a restarted ingest with a shorter --stream-max-age does to the stream.
      const { config } = await short.jsm.streams.info("TRACKHOOK_EVENTS");
      await short.jsm.streams.update("TRACKHOOK_EVENTS", { ...config, max_age: 12_000 * 1e6 });
      const deadLetter = await expectDeadLetter(short, 16_000);
      expect(deadLetter.reason).toBe("retry_window_exhausted");
      expect(deadLetter.at - stored).toBeLessThan(12_000);
    }, { streamCheckMs: 300 });
  }, 30_000);
});

describe("a backlog behind a receiver that fails slowly, near the stream's max_age", () => {
  it("is dead-lettered, every message, before the stream drops it (regression: messages that reached the consumer only after their window were each sent once more, and the rest expired unseen)", async () => {
    await withShortStream(12_000, (receiver) => {
      // Fails, but only after a while: the breaker does not pause it, and every send holds a slot.
      receiver.on("/slow-503", (_req, _n, res) => void setTimeout(() => res.writeHead(503).end("later"), 400));
      return { outlasts: { urls: [receiver.url("/slow-503")], maxInFlight: 2 } };
    }, async (short, receiver) => {
      // Two slots at 400 ms a send: five first sends a second, so the 80th message would reach
      // the consumer ~16 s after it was stored; the window in force is 10.8 s, max_age 12 s.
      const count = 80;
      await Promise.all(Array.from({ length: count }, (_, i) =>
        short.js.publish("trackhook.events.default.web.track", JSON.stringify({ type: "track", userId: "u", event: "E", messageId: `backlog-${i}` }), { msgID: `default/web/backlog-${i}` })));
      const deadline = Date.now() + 16_000;
      let letters = 0;
      while (Date.now() < deadline) {
        letters = (await short.jsm.streams.info(DLQ_STREAM)).state.messages;
        if (letters >= count) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(letters).toBe(count);
      // And each was sent at most once before its window closed.
      expect(receiver.requests("/slow-503").length).toBeLessThan(count);
    });
  }, 30_000);
});

async function expectDeadLetter(harness: NatsHarness, timeoutMs: number): Promise<{ reason: string | undefined; at: number }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const m = await harness.jsm.streams.getMessage(DLQ_STREAM, { last_by_subj: "trackhook.dlq.default.outlasts" }).catch(() => null);
    if (m) return { reason: m.header?.get("Trackhook-Reason"), at: m.timestamp ? Date.parse(m.timestamp) : Date.now() };
    if (Date.now() > deadline) throw new Error("no dead letter within the time");
    await new Promise((r) => setTimeout(r, 100));
  }
}
