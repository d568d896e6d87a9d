// The delivery service among others: it never deletes consumers it did not manage (another
// deliver process with another config keeps its own), and a dead destination cannot take all of
// the process's delivery slots from a healthy one.
import { createHmac } from "node:crypto";
import type { ServerResponse } from "node:http";
import { nanos } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigHolder, FileConfigProvider, compileConfig } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, DestinationWorker, WebhookSender, ensureDestinationConsumer, type WebhookSending } from "../../dataplane/delivery/mod.ts";
import { readDeadLetters } from "../../dataplane/admin/mod.ts";
import { createLogger, type Logger } from "../../dataplane/logging.ts";
import { ATTEMPTS_STREAM, DLQ_STREAM, EVENTS_STREAM, attemptsStreamConfig, consumerName, dlqStreamConfig, dlqSubject, ensureStream, eventsStreamConfig, type SideStreamSettings } from "../../dataplane/nats/mod.ts";
import { freeze, thaw } from "../harness/freeze.ts";
import { DEFAULT_STREAM } from "../harness/ingest.ts";
import { coldBackup, startNats, type NatsHarness } from "../harness/nats.ts";
import { answer, startReceiver, type Receiver } from "../harness/receiver.ts";
import { tempDir } from "../harness/temp.ts";

let nats: NatsHarness;
let receiver: Receiver;
const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "test" });
beforeAll(async () => {
  nats = await startNats();
  await ensureStream(nats.jsm, eventsStreamConfig(DEFAULT_STREAM));
  receiver = await startReceiver();
});
afterAll(async () => {
  await sender.close();
  await receiver?.close();
  await nats?.stop();
});

function configOf(destinations: Array<{ name: string; url: string; timeout?: string; maxInFlight?: number; retryWindow?: string; sources?: string[] }>) {
  // Each destination reads the source of its own name unless it lists others.
  const sources = [...new Set(destinations.flatMap((d) => d.sources ?? [d.name]))];
  return compileConfig(
    [
      ...sources.flatMap((name) => [
        { apiVersion: "v1", kind: "Secret", metadata: { name: `${name}-key` }, stringData: { writeKey: `w-${name}` } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name }, spec: { writeKeySecretRef: { name: `${name}-key`, key: "writeKey" } } },
      ]),
      ...destinations.map((d) => ({
        apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: d.name },
        spec: {
          sources: d.sources ?? [d.name], urls: [d.url], ...(d.timeout ? { timeout: d.timeout } : {}), ...(d.maxInFlight ? { maxInFlight: d.maxInFlight } : {}),
          ...(d.retryWindow ? { retryWindow: d.retryWindow } : {}),
        },
      })),
    ].map((body, i) => ({ origin: `doc ${i + 1}`, body })),
  );
}

const start = async (
  config: ConfigHolder,
  options: {
    maxInFlight?: number; consumerRemovalGraceMs?: number; consumerRemovalRetryMs?: number; consumerCheckMs?: number; deadLetterRetryMs?: number; startRetryMs?: number;
    on?: NatsHarness; log?: Logger; metrics?: DeliveryMetrics; dlqStream?: SideStreamSettings; sender?: WebhookSending;
  } = {},
) =>
  DeliveryService.start({
    nc: await (options.on ?? nats).connect(), config, sender: options.sender ?? sender,
    log: options.log ?? createLogger({ level: "silent" }), metrics: options.metrics ?? new DeliveryMetrics({ defaultMetrics: false }),
    consumerRemovalGraceMs: options.consumerRemovalGraceMs ?? 0,
    ...(options.maxInFlight ? { maxInFlight: options.maxInFlight } : {}),
    ...(options.consumerCheckMs ? { consumerCheckMs: options.consumerCheckMs } : {}),
    ...(options.consumerRemovalRetryMs ? { consumerRemovalRetryMs: options.consumerRemovalRetryMs } : {}),
    ...(options.deadLetterRetryMs ? { deadLetterRetryMs: options.deadLetterRetryMs } : {}),
    ...(options.startRetryMs ? { startRetryMs: options.startRetryMs } : {}),
    ...(options.dlqStream ? { dlqStream: options.dlqStream } : {}),
  });

/** A logger whose JSON lines (of `level` and above) the test reads back. */
function capturedLog(level: string): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  return { lines, log: createLogger({ level, destination: { write: (line) => void lines.push(line) } }) };
}

/** Stores a track message of a source, as ingest would. */
const publishTo = (source: string, on: NatsHarness = nats) => (id: string) =>
  on.js.publish(`trackhook.events.default.${source}.track`, JSON.stringify({ type: "track", messageId: id, userId: "u", event: "e" }), { msgID: `default/${source}/${id}` });

/** Stores a delete notification (a user's erasure) of a source, as the operator or delete-user would. */
const storeErasure = (on: NatsHarness, source: string, id: string) =>
  on.js.publish(`trackhook.events.default.${source}.delete`, JSON.stringify({ type: "delete", userId: "u9", messageId: id, timestamp: new Date().toISOString(), context: {} }), { msgID: `default/${source}/${id}` });

/** A destination's dead letters as [messageId, reason, attempts], oldest first. */
async function deadLetterRows(on: NatsHarness, destination: string): Promise<Array<[string | undefined, string, number]>> {
  const rows: Array<[string | undefined, string, number]> = [];
  for await (const letter of readDeadLetters(on.nc, { namespace: "default", destination })) rows.push([letter.messageId, letter.reason, letter.attempts]);
  return rows;
}

const consumers = async () => {
  const names: string[] = [];
  for await (const c of nats.jsm.consumers.list(EVENTS_STREAM)) names.push(c.name);
  return names.sort();
};

/**
 * Waits until the server has the consumer's only message acked, then for two of the service's
 * consumer checks, so that its watch has noted the ack (a fixed 800 ms could miss it on a slow
 * machine, and the recreated consumer then sent the message again: found by a flake hunt).
 */
async function ackNoted(consumer: string, checkMs: number, on: NatsHarness = nats): Promise<void> {
  await expect.poll(async () => (await on.jsm.consumers.info(EVENTS_STREAM, consumer)).num_ack_pending, { timeout: 10_000 }).toBe(0);
  await new Promise((r) => setTimeout(r, 2 * checkMs + 100));
}

describe("delivery service", () => {
  it("leaves alone the consumers of another process's destinations", async () => {
    const a = await start(new ConfigHolder(configOf([{ name: "alpha", url: receiver.url("/alpha") }])));
    const b = await start(new ConfigHolder(configOf([{ name: "beta", url: receiver.url("/beta") }])));
    try {
      expect(await consumers()).toEqual(["dest_default_alpha", "dest_default_beta"]);
      // Each removes only what it managed itself.
      await b.apply({ sources: [], destinations: [] });
      expect(await consumers()).toEqual(["dest_default_alpha"]);
    } finally {
      await a.stop();
      await b.stop();
    }
  });

  it("keeps a removed destination's consumer that another process still delivers from, and the last process to drop it removes it (found by a VM install review: removed under the other, which sent messages twice)", async () => {
    const { log, lines } = capturedLog("warn");
    const both = () => new ConfigHolder(configOf([{ name: "shared", url: receiver.url("/shared") }]));
    const first = both();
    const second = both();
    const a = await start(first, { consumerRemovalGraceMs: 300, log });
    const b = await start(second, { consumerRemovalGraceMs: 300 });
    const publish = publishTo("shared");
    try {
      first.set({ sources: [], destinations: [] }); // one machine's copy of the files changed first
      await expect.poll(() => lines.some((l) => l.includes("still delivered by another delivery process")), { timeout: 5_000 }).toBe(true);
      expect(JSON.parse(lines.find((l) => l.includes("still delivered by another delivery process"))!)).toMatchObject({ consumers: ["dest_default_shared"] });
      expect(await consumers()).toContain("dest_default_shared");
      await publish("shared-1");
      await receiver.waitFor("/shared", 1);
      second.set({ sources: [], destinations: [] }); // and then the other's
      await expect.poll(consumers, { timeout: 5_000 }).not.toContain("dest_default_shared");
      expect(lines.filter((l) => l.includes("removed consumers"))).toEqual([]);
    } finally {
      await a.stop();
      await b.stop();
    }
  });

  it("keeps it too while the other process, busy with a backlog, has no pull waiting (found by a review: removed under it, 54 messages sent twice)", async () => {
    const { log, lines } = capturedLog("warn");
    receiver.on("/busy", (_req: unknown, _n: number, res: ServerResponse) => void setTimeout(() => res.writeHead(200).end("ok"), 20));
    const both = () => new ConfigHolder(configOf([{ name: "busy", url: receiver.url("/busy") }]));
    const first = both();
    const a = await start(first, { consumerRemovalGraceMs: 3_000, log });
    // Two slots for a destination whose consumer lets 100 out: its next pull waits for room.
    const b = await start(both(), { maxInFlight: 2 });
    const publish = publishTo("busy");
    try {
      first.set({ sources: [], destinations: [] });
      await expect.poll(() => a.destinations).toEqual([]);
      // More than a pull takes, and 5 s of work for b alone: its pulls are all answered, and its
      // next waits for room while a's grace ends.
      await Promise.all(Array.from({ length: 500 }, (_, i) => publish(`busy-${i}`)));
      await expect.poll(() => lines.some((l) => l.includes("still delivered by another delivery process")), { timeout: 8_000 }).toBe(true);
      expect(await consumers()).toContain("dest_default_busy");
      await receiver.waitFor("/busy", 500);
      await new Promise((r) => setTimeout(r, 300));
      const ids = receiver.requests("/busy").map((r) => JSON.parse(r.body.toString()).messageId as string);
      expect(new Set(ids).size).toBe(500);
      expect(ids).toHaveLength(500); // none twice
    } finally {
      await a.stop();
      await b.stop();
    }
  });

  it("keeps a removed destination's consumer, and the messages it still had to deliver, for a grace period (regression: a config file caught empty for a second lost the backlog)", async () => {
    const config = new ConfigHolder(configOf([{ name: "gamma", url: receiver.url("/gamma") }]));
    // A grace well beyond the steps below, which must all happen within it (a slow machine).
    const service = await start(config, { consumerRemovalGraceMs: 5_000 });
    const publish = publishTo("gamma");
    try {
      const full = config.current();
      config.set({ sources: [], destinations: [] }); // the file read while being written
      await expect.poll(() => service.destinations).toEqual([]);
      await publish("g-while-gone");
      await new Promise((r) => setTimeout(r, 500));
      expect(receiver.requests("/gamma")).toHaveLength(0); // nothing is sent to it meanwhile
      expect(await consumers()).toContain("dest_default_gamma");
      config.set(full); // the write completed
      await receiver.waitFor("/gamma", 1);
      expect(JSON.parse(receiver.requests("/gamma")[0]!.body.toString()).messageId).toBe("g-while-gone");

      // Gone for longer than the grace: the consumer is removed.
      config.set({ sources: [], destinations: [] });
      await new Promise((r) => setTimeout(r, 500));
      expect(await consumers()).toContain("dest_default_gamma");
      await expect.poll(consumers, { timeout: 5_000 }).not.toContain("dest_default_gamma");
    } finally {
      await service.stop();
    }
  });

  it("removes a removed destination's consumer once NATS lets it, when NATS did not at the end of the grace (found by a soak test: it was kept for good, its pending growing)", { timeout: 45_000 }, async () => {
    const own = await startNats();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const { log, lines } = capturedLog("warn");
    const config = new ConfigHolder(configOf([{ name: "kappa", url: receiver.url("/kappa") }]));
    const service = await start(config, { on: own, consumerRemovalGraceMs: 1_000, consumerRemovalRetryMs: 1_000, log });
    const pid = own.server.pid!;
    const ownConsumers = async () => (await own.jsm.consumers.list(EVENTS_STREAM).next()).map((c) => c.name);
    try {
      config.set({ sources: [], destinations: [] });
      await expect.poll(() => service.destinations).toEqual([]);
      await freeze(pid); // away when the grace ends, and through the removal's two 5 s requests
      await new Promise((r) => setTimeout(r, 12_000));
      thaw(pid);
      await expect.poll(() => lines.some((l) => l.includes("could not be removed; trying again")), { timeout: 5_000 }).toBe(true);
      await expect.poll(ownConsumers, { timeout: 15_000, interval: 500 }).not.toContain("dest_default_kappa");
    } finally {
      thaw(pid);
      await service.stop();
      await own.stop();
    }
  });

  it("says how many messages a removed consumer had not delivered (found by a review: a destination disabled past the grace lost 3,548 without a number)", async () => {
    const { log, lines } = capturedLog("info");
    const config = new ConfigHolder(configOf([{ name: "omicron", url: receiver.url("/omicron") }]));
    const service = await start(config, { consumerRemovalGraceMs: 1_000, log });
    try {
      config.set({ sources: [], destinations: [] });
      // Stored once its worker has stopped: none of them is delivered, all wait in the consumer.
      await expect.poll(() => service.destinations).toEqual([]);
      const publish = publishTo("omicron");
      for (const id of ["o-1", "o-2", "o-3"]) await publish(id);
      await expect.poll(consumers, { timeout: 10_000 }).not.toContain("dest_default_omicron");
      // Logged once the removal has returned, which may be just after the listing no longer has it.
      const removedLine = () => lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => String(l.msg).startsWith("removed consumers"));
      await expect.poll(removedLine, { timeout: 5_000 }).toBeDefined();
      expect(removedLine()).toMatchObject({ level: 40, undelivered: { dest_default_omicron: 3 } });
      expect(receiver.requests("/omicron")).toHaveLength(0);
    } finally {
      await service.stop();
    }
  });

  it("recreates a consumer deleted under delivery, from its last acknowledged message, and delivers what was stored meanwhile (regression: pulling stopped silently, and a restart skipped those messages)", async () => {
    const config = new ConfigHolder(configOf([{ name: "delta", url: receiver.url("/delta") }]));
    const service = await start(config, { consumerRemovalGraceMs: 0, consumerCheckMs: 500 });
    const publish = publishTo("delta");
    const ids = () => receiver.requests("/delta").map((r) => JSON.parse(r.body.toString()).messageId as string);
    try {
      await publish("d-before");
      await receiver.waitFor("/delta", 1);
      await ackNoted("dest_default_delta", 500);
      await nats.jsm.consumers.delete(EVENTS_STREAM, "dest_default_delta"); // `nats consumer rm`
      for (const id of ["d-1", "d-2", "d-3"]) await publish(id);
      await receiver.waitFor("/delta", 4, 15_000);
      expect(ids()).toEqual(["d-before", "d-1", "d-2", "d-3"]);
      expect(await consumers()).toContain("dest_default_delta");
    } finally {
      await service.stop();
    }
  });

  it("makes the dead-letter and attempt streams again when they are lost, and the lag gauges stay meanwhile (regression: dead letters failed until a restart, and every lag gauge went blank)", async () => {
    const metrics = new DeliveryMetrics({ defaultMetrics: false });
    const captured = capturedLog("error");
    const service = await start(new ConfigHolder(configOf([{ name: "lost", url: receiver.url("/lost") }])), { metrics, log: captured.log });
    const recreated = async () => (await metrics.streamsRecreated.get()).values.map((v) => [v.labels.stream, v.value]).sort();
    try {
      // Served from 0, so that an alert on increase() sees the first loss (found by a diff review).
      expect(await recreated()).toEqual([[ATTEMPTS_STREAM, 0], [DLQ_STREAM, 0]]);
      await nats.jsm.streams.delete(DLQ_STREAM);
      await nats.jsm.streams.delete(ATTEMPTS_STREAM);
      const pending = async () => (await metrics.registry.getSingleMetric("trackhook_delivery_consumer_pending_messages")!.get()).values.map((v) => v.labels.destination);
      expect(await pending()).toContain("default/lost");
      await expect.poll(async () => (await nats.jsm.streams.info(DLQ_STREAM).catch(() => undefined))?.config.name, { timeout: 10_000, interval: 200 }).toBe(DLQ_STREAM);
      await expect.poll(async () => (await nats.jsm.streams.info(ATTEMPTS_STREAM).catch(() => undefined))?.config.name, { timeout: 10_000, interval: 200 }).toBe(ATTEMPTS_STREAM);
      expect(captured.lines.map((l) => JSON.parse(l) as { stream: string; msg: string }).filter((l) => l.msg.startsWith("the stream was missing")).map((l) => l.stream).sort()).toEqual([ATTEMPTS_STREAM, DLQ_STREAM]);
      // Counted, for an alert: the 503s and lines of such a loss pass within seconds (found by a disaster-recovery review).
      expect(await recreated()).toEqual([[ATTEMPTS_STREAM, 1], [DLQ_STREAM, 1]]);
    } finally {
      await service.stop();
    }
  });

  it("with two replicas, a deleted consumer is recreated once, and only a replica whose start took effect says it recreated it (found by a review: each claimed it, with its own start)", async () => {
    const config = new ConfigHolder(configOf([{ name: "nu", url: receiver.url("/nu") }]));
    const captured = capturedLog("warn");
    const [one, two] = [await start(config, { consumerCheckMs: 300, log: captured.log }), await start(config, { consumerCheckMs: 300, log: captured.log })];
    const lines = () => captured.lines.map((line) => JSON.parse(line) as { msg: string; startSeq?: number });
    try {
      await publishTo("nu")("n-before");
      await receiver.waitFor("/nu", 1);
      await new Promise((r) => setTimeout(r, 500));
      await nats.jsm.consumers.delete(EVENTS_STREAM, "dest_default_nu");
      const said = (text: string) => lines().filter((l) => l.msg.includes(text)).length;
      await expect.poll(() => said("recreated after the last acknowledged message seen"), { timeout: 15_000 }).toBeGreaterThanOrEqual(1);
      // Both may make the same request (the same last ack seen), which NATS takes as one; a
      // replica whose own start lost the race says it follows the consumer another made, and one
      // that finds the consumer back before it confirmed the loss (5 s) says nothing: its pulls
      // reach the new consumer (they are renewed after two missed heartbeats).
      const { config: made } = await nats.jsm.consumers.info(EVENTS_STREAM, "dest_default_nu");
      const claims = lines().filter((l) => l.msg.includes("recreated after the last acknowledged message seen"));
      expect(claims.length).toBeGreaterThanOrEqual(1);
      for (const claim of claims) expect(claim.startSeq).toBe(made.opt_start_seq);
      await publishTo("nu")("n-after");
      await receiver.waitFor("/nu", 2, 10_000);
    } finally {
      await one.stop();
      await two.stop();
    }
  });

  it("a consumer the operator made again after its stream was lost, then deleted, resumes after its last ack in the new stream (found by a disaster-recovery review: the whole stream was sent again)", async () => {
    const own = await startNats();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const config = new ConfigHolder(configOf([{ name: "rho", url: receiver.url("/rho") }]));
    const service = await start(config, { on: own, consumerCheckMs: 300 });
    const publish = publishTo("rho", own);
    const ids = () => receiver.requests("/rho").map((r) => JSON.parse(r.body.toString()).messageId as string);
    try {
      await publish("r-before");
      await receiver.waitFor("/rho", 1);
      // nats-server's store lost, and the operator making the stream and the consumer again
      // within a second, before the watch confirms the consumer gone.
      await own.jsm.streams.delete(EVENTS_STREAM);
      await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
      await ensureDestinationConsumer(own.jsm, config.current().destinations[0]!);
      for (const id of ["r-1", "r-2", "r-3"]) await publish(id);
      await receiver.waitFor("/rho", 4, 15_000);
      await ackNoted("dest_default_rho", 300, own);
      await own.jsm.consumers.delete(EVENTS_STREAM, "dest_default_rho");
      await publish("r-4");
      await receiver.waitFor("/rho", 5, 15_000);
      await new Promise((r) => setTimeout(r, 500));
      expect(ids().sort()).toEqual(["r-1", "r-2", "r-3", "r-4", "r-before"]); // sent in parallel: in any order
    } finally {
      await service.stop();
      await own.stop();
    }
  });

  it("a consumer lost when the events stream is restored from a backup delivers what was stored since the restore (found by a disaster-recovery review: those messages were skipped)", async () => {
    const own = await startNats();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const backup = await coldBackup(own); // taken before the destination existed
    const streamBack = () => expect.poll(() => own.jsm.streams.info(EVENTS_STREAM).then(() => true, () => false), { timeout: 15_000, interval: 200 }).toBe(true);
    await streamBack();
    const captured = capturedLog("error");
    const service = await start(new ConfigHolder(configOf([{ name: "sigma", url: receiver.url("/sigma") }])), { on: own, consumerCheckMs: 300, log: captured.log });
    const publish = publishTo("sigma", own);
    try {
      for (const id of ["s-1", "s-2", "s-3"]) await publish(id);
      await receiver.waitFor("/sigma", 3, 15_000);
      await ackNoted("dest_default_sigma", 300, own);
      // Restored: the same stream (its creation time too), its sequence back at 0, no consumer.
      await backup.restore();
      await streamBack();
      // Stored by ingest before delivery notices the consumer gone: sequences 1 to 4 again, past
      // the floor it had seen (3; found by a diff review: resumed after it, s-4 to s-6 skipped).
      for (const id of ["s-4", "s-5", "s-6", "s-7"]) await publish(id);
      await receiver.waitFor("/sigma", 7, 20_000);
      // Sent in parallel (up to maxInFlight): in any order.
      expect(receiver.requests("/sigma").map((r) => JSON.parse(r.body.toString()).messageId).sort()).toEqual(["s-1", "s-2", "s-3", "s-4", "s-5", "s-6", "s-7"]);
      expect(captured.lines.map((l) => JSON.parse(l) as { msg: string; startTime?: string }).find((l) => l.msg.includes("sequence went back"))?.startTime).toBeDefined();
    } finally {
      await service.stop();
      await own.stop();
    }
  });

  it("a consumer deleted just before a config change of its destination is recreated from where it had got to (found by a review: the change recreated it from now)", async () => {
    const docs = configOf([{ name: "theta", url: receiver.url("/theta") }]);
    const config = new ConfigHolder(docs);
    const service = await start(config, { consumerCheckMs: 300 });
    const publish = publishTo("theta");
    try {
      await publish("t-before");
      await receiver.waitFor("/theta", 1);
      await ackNoted("dest_default_theta", 300);
      await nats.jsm.consumers.delete(EVENTS_STREAM, "dest_default_theta");
      for (const id of ["t-1", "t-2"]) await publish(id);
      config.set({ ...docs, destinations: docs.destinations.map((d) => ({ ...d, timeoutMs: 7_000 })) }); // before the watch confirms the loss
      await receiver.waitFor("/theta", 3, 10_000);
      expect(receiver.requests("/theta").map((r) => JSON.parse(r.body.toString()).messageId)).toEqual(["t-before", "t-1", "t-2"]);
    } finally {
      await service.stop();
    }
  });

  it("retries a recovery whose new worker fails to start, instead of leaving the destination stopped (found by a review)", async () => {
    const config = new ConfigHolder(configOf([{ name: "eta", url: receiver.url("/eta") }]));
    const service = await start(config, { consumerRemovalGraceMs: 0, consumerCheckMs: 300 });
    const publish = publishTo("eta");
    const originalStart = DestinationWorker.prototype.start;
    try {
      await publish("h-before");
      await receiver.waitFor("/eta", 1);
      let failures = 0;
      DestinationWorker.prototype.start = async function (this: DestinationWorker) {
        if (failures++ === 0) throw new Error("timeout (NATS did not answer)"); // the next start works
        return originalStart.call(this);
      };
      await nats.jsm.consumers.delete(EVENTS_STREAM, "dest_default_eta");
      await publish("h-after");
      await receiver.waitFor("/eta", 2, 20_000);
      expect(failures).toBe(2);
      expect(service.destinations).toEqual(["default/eta"]);
    } finally {
      DestinationWorker.prototype.start = originalStart;
      await service.stop();
    }
  });

  it("a config change does not wait for another destination's in-flight requests (regression: one tenant's URL change held another's new destination back 21 s)", async () => {
    const slow = (_req: unknown, _n: number, res: ServerResponse) => void setTimeout(() => res.writeHead(200).end("ok"), 6_000);
    receiver.on("/rho-old", slow);
    const config = new ConfigHolder(configOf([{ name: "rho", url: receiver.url("/rho-old"), timeout: "10s" }]));
    const service = await start(config, { consumerRemovalGraceMs: 60_000 });
    try {
      await publishTo("rho")("rho-1");
      await receiver.waitFor("/rho-old", 1); // in flight for 6 s: stopping rho's worker waits for it
      // rho's URL changes (its worker restarts); then sigma is added, in a change of its own (the
      // diff review: in one change only, the first fix passed) and in one with rho's again.
      config.set(configOf([{ name: "rho", url: receiver.url("/rho-new"), timeout: "10s" }]));
      await new Promise((r) => setTimeout(r, 300));
      config.set(configOf([{ name: "rho", url: receiver.url("/rho-new"), timeout: "10s" }, { name: "sigma", url: receiver.url("/sigma") }]));
      const changed = Date.now();
      await vi.waitFor(() => expect(service.destinations).toContain("default/sigma"), { timeout: 15_000, interval: 50 });
      expect(Date.now() - changed).toBeLessThan(3_000);
      expect(service.destinations).not.toContain("default/rho"); // its old worker still finishing
      await publishTo("sigma")("sigma-1");
      await receiver.waitFor("/sigma", 1);
      // rho's message, answered in time, is delivered once; its successor starts after, and sends nothing again.
      await vi.waitFor(() => expect(service.destinations).toContain("default/rho"), { timeout: 15_000, interval: 50 });
      await new Promise((r) => setTimeout(r, 1_000));
      expect(receiver.requests("/rho-old")).toHaveLength(1);
      expect(receiver.requests("/rho-new")).toHaveLength(0);
      expect(service.destinations.sort()).toEqual(["default/rho", "default/sigma"]);
    } finally {
      await service.stop();
    }
  }, 30_000);

  it("does not bring back a consumer deleted on purpose, just after the config stopped its destination (as the operator does), while the config change is still being applied", async () => {
    const slow = (_req: unknown, _n: number, res: ServerResponse) => void setTimeout(() => res.writeHead(200).end("ok"), 4_000);
    receiver.on("/eps-x", slow);
    const both = configOf([{ name: "eps-x", url: receiver.url("/eps-x") }, { name: "eps-y", url: receiver.url("/eps-y") }]);
    const config = new ConfigHolder(both);
    const service = await start(config, { consumerRemovalGraceMs: 60_000, consumerCheckMs: 300 });
    try {
      await nats.js.publish("trackhook.events.default.eps-x.track", JSON.stringify({ type: "track", messageId: "x-1", userId: "u", event: "e" }), { msgID: "default/eps-x/x-1" });
      await receiver.waitFor("/eps-x", 1); // in flight for 4 s: stopping eps-x's worker waits for it
      // One change: eps-x's timeout edited (its worker restarts, first), eps-y disabled; then eps-y's consumer deleted.
      const [x, y] = both.destinations;
      config.set({ sources: both.sources, destinations: [{ ...x!, timeoutMs: 6_000 }, { ...y!, enabled: false }] });
      await nats.jsm.consumers.delete(EVENTS_STREAM, "dest_default_eps-y");
      await new Promise((r) => setTimeout(r, 9_000)); // past the watch's confirmation (5 s), and eps-x's send
      expect(await consumers()).not.toContain("dest_default_eps-y");
    } finally {
      await service.stop();
    }
  });

  it("recreates a lost consumer from the start of the events stream when the stream itself was recreated (its sequence numbers started again), empty or not", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const config = new ConfigHolder(configOf([{ name: "zeta", url: ownReceiver.url("/zeta") }]));
    const service = await start(config, { consumerRemovalGraceMs: 0, consumerCheckMs: 300, on: own });
    const publish = publishTo("zeta", own);
    try {
      for (let i = 0; i < 10; i++) await publish(`z-old-${i}`);
      await ownReceiver.waitFor("/zeta", 10);
      await new Promise((r) => setTimeout(r, 600)); // the ack floor (10) noted
      await own.jsm.streams.delete(EVENTS_STREAM); // storage lost; ingest recreates the stream at start
      await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
      // Made again while the stream is still empty (found by a review: its first_seq, 0, was
      // refused as a start, and the consumer came back only with the first new message).
      await expect.poll(async () => (await own.jsm.consumers.info(EVENTS_STREAM, "dest_default_zeta").catch(() => undefined))?.name, { timeout: 12_000 }).toBe("dest_default_zeta");
      for (let i = 0; i < 3; i++) await publish(`z-new-${i}`);
      await ownReceiver.waitFor("/zeta", 13, 15_000);
      expect(ownReceiver.requests("/zeta").slice(10).map((r) => JSON.parse(r.body.toString()).messageId)).toEqual(["z-new-0", "z-new-1", "z-new-2"]);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("dead-letters a message of a recreated events stream whose sequence an earlier dead letter had (found by a review: dropped as that one's duplicate, acked, and lost)", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    ownReceiver.on("/gone", answer(404));
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const service = await start(new ConfigHolder(configOf([{ name: "eta", url: ownReceiver.url("/gone") }])), { consumerCheckMs: 300, on: own });
    const publish = publishTo("eta", own);
    const letters = async () => (await own.jsm.streams.info(DLQ_STREAM)).state.messages;
    try {
      for (let i = 0; i < 2; i++) await publish(`eta-old-${i}`);
      await expect.poll(letters, { timeout: 10_000 }).toBe(2);
      await new Promise((r) => setTimeout(r, 600)); // the ack floor noted
      await own.jsm.streams.delete(EVENTS_STREAM);
      await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
      for (let i = 0; i < 2; i++) await publish(`eta-new-${i}`); // sequences 1 and 2 again
      await ownReceiver.waitFor("/gone", 4, 15_000);
      await expect.poll(letters, { timeout: 5_000 }).toBe(4);
      const ids = [];
      for await (const letter of readDeadLetters(own.nc, { namespace: "default", destination: "eta" })) ids.push(letter.messageId);
      expect(ids).toEqual(["eta-old-0", "eta-old-1", "eta-new-0", "eta-new-1"]);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("a stored messageId with a lone surrogate is delivered, and a message delivery keeps failing on is dead-lettered after three tries, not held for the retry window (found by a fidelity review: it held a slot for hours, and 100 of them stopped the destination)", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const config = new ConfigHolder(configOf([{ name: "kappa", url: ownReceiver.url("/kappa"), maxInFlight: 2 }]));
    // A fault no message should cause: the sender throws for one message.
    const throwing: WebhookSending = {
      send: (request) => {
        if (Buffer.from(request.body).includes("explodes")) throw new Error("boom");
        return sender.send(request);
      },
    };
    const service = await start(config, { on: own, sender: throwing });
    try {
      const store = (id: string) => own.js.publish("trackhook.events.default.kappa.track", JSON.stringify({ type: "track", messageId: id, userId: "u", event: "e" }), { msgID: `default/kappa/${Date.now()}-${Math.random()}` });
      await store("lone-\ud800-x"); // stored before ingest refused such ids
      await store("explodes");
      await store("explodes-too");
      await store("after");
      const ids = async () => (await ownReceiver.waitFor("/kappa", 2, 20_000)).map((r) => r.headers["x-delivery-id"]);
      expect((await ids()).sort()).toEqual(["default/kappa/kappa/after", "default/kappa/kappa/lone-%EF%BF%BD-x"]);
      await expect.poll(() => deadLetterRows(own, "kappa").then((rows) => rows.sort()), { timeout: 20_000 }).toEqual([["explodes", "invalid_message", 3], ["explodes-too", "invalid_message", 3]]);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("a source leaving a destination's sources has its undelivered delete notifications dead-lettered (found by a review: a destination moved to another source dropped a pending erasure)", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    ownReceiver.on("/iota", answer(503));
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const config = new ConfigHolder(configOf([{ name: "iota", url: ownReceiver.url("/iota"), sources: ["web", "app"] }]));
    const { log, lines } = capturedLog("error");
    const service = await start(config, { on: own, log });
    try {
      await publishTo("web", own)("web-event");
      await storeErasure(own, "web", "delete-web");
      await storeErasure(own, "app", "delete-app");
      await ownReceiver.waitFor("/iota", 3); // all tried once, all waiting for a retry
      config.set(configOf([{ name: "iota", url: ownReceiver.url("/iota"), sources: ["app"] }]));
      await expect.poll(() => deadLetterRows(own, "iota"), { timeout: 10_000 }).toEqual([["delete-web", "source_removed", 0]]);
      await expect.poll(() => lines.some((l) => l.includes("moved to the dead-letter queue, reason source_removed"))).toBe(true);
      // The source still listed keeps its erasure, delivered once the receiver answers.
      const answered = ownReceiver.requests("/iota").length;
      ownReceiver.on("/iota", answer(200));
      await expect.poll(() => ownReceiver.requests("/iota").slice(answered).map((r) => (JSON.parse(r.body.toString()) as { messageId: string }).messageId), { timeout: 20_000 }).toContain("delete-app");
      const info = await own.jsm.consumers.info(EVENTS_STREAM, consumerName("default", "iota"));
      expect(info.config.filter_subjects).toEqual(["trackhook.events.default.app.>", "trackhook.replay.default.iota"]);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("a source leaving a destination while the DLQ cannot take its notices: the destination goes on delivering, the leaving source is still read, and the notices move once there is room (found by a diff review: the whole destination stopped)", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    ownReceiver.on("/mu", answer(503));
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const config = new ConfigHolder(configOf([{ name: "mu", url: ownReceiver.url("/mu"), sources: ["web", "app"] }]));
    const { log, lines } = capturedLog("error");
    const service = await start(config, { on: own, log, dlqStream: { maxBytes: 64 * 1024 ** 2, replicas: 1, maxPerDestination: 1 } });
    try {
      await own.js.publish(dlqSubject("default", "mu"), "{}"); // the destination's one dead letter: its share is full
      await storeErasure(own, "web", "delete-web");
      await ownReceiver.waitFor("/mu", 1); // tried once, waiting for a retry
      config.set(configOf([{ name: "mu", url: ownReceiver.url("/mu"), sources: ["app"] }]));
      await expect.poll(() => lines.some((l) => l.includes("could not be moved to the dead-letter queue: those sources are still read")), { timeout: 10_000 }).toBe(true);
      ownReceiver.on("/mu", answer(200));
      await publishTo("app", own)("app-after");
      const delivered = () => ownReceiver.requests("/mu").map((r) => (JSON.parse(r.body.toString()) as { messageId: string }).messageId);
      await expect.poll(delivered, { timeout: 20_000 }).toContain("app-after");
      expect(lines.some((l) => l.includes("could not start"))).toBe(false);
      // Room made: the next config change (or the minute's retry) moves it and narrows the filter.
      await own.jsm.streams.purge(DLQ_STREAM, { filter: dlqSubject("default", "mu") });
      config.set(configOf([{ name: "mu", url: ownReceiver.url("/mu"), sources: ["app"], timeout: "6s" }]));
      await expect.poll(async () => (await own.jsm.consumers.info(EVENTS_STREAM, consumerName("default", "mu"))).config.filter_subjects, { timeout: 20_000 })
        .toEqual(["trackhook.events.default.app.>", "trackhook.replay.default.mu"]);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("a destination removed from the config has its undelivered delete notifications dead-lettered, and not its events (found by a review: an erasure being retried vanished with the consumer)", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    ownReceiver.on("/theta", answer(503));
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const config = new ConfigHolder(configOf([{ name: "theta", url: ownReceiver.url("/theta") }]));
    const { log, lines } = capturedLog("error");
    const service = await start(config, { on: own, log });
    try {
      await publishTo("theta", own)("theta-event");
      await storeErasure(own, "theta", "delete-theta");
      await ownReceiver.waitFor("/theta", 2); // both tried once, both waiting for a retry
      config.set(configOf([]));
      await expect.poll(() => deadLetterRows(own, "theta"), { timeout: 10_000 }).toEqual([["delete-theta", "destination_disabled", 0]]);
      await expect.poll(() => lines.some((l) => l.includes("delete notifications (user erasures) or replayed dead letters not yet delivered: moved to the dead-letter queue"))).toBe(true);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("starts a destination added while NATS was away once it is back, and delivers what was stored for it meanwhile (regression: it was tried again only at the next config change, and then started from now)", { timeout: 60_000 }, async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const metrics = new DeliveryMetrics({ defaultMetrics: false });
    const config = new ConfigHolder(configOf([{ name: "iota", url: ownReceiver.url("/iota") }]));
    const { log, lines } = capturedLog("error");
    // Its next try comes 5 s after a failed one: well after NATS is back and the messages below
    // are stored, however long nats-server takes to restart (with 1 s, a slow restart let it
    // start before them, and the test then proved nothing: found by a flake hunt).
    const service = await start(config, { on: own, log, metrics, startRetryMs: 5_000 });
    const up = async () => (await metrics.registry.getSingleMetric("trackhook_delivery_destination_up")!.get()).values.map((v) => `${v.labels.destination}=${v.value}`).sort();
    try {
      expect(await up()).toEqual(["default/iota=1"]);
      await own.server.kill();
      const added = new Promise<void>((resolve) => {
        const unsubscribe = config.subscribe(() => { unsubscribe(); resolve(); });
      });
      config.set(configOf([{ name: "iota", url: ownReceiver.url("/iota") }, { name: "kappa", url: ownReceiver.url("/kappa") }]));
      await added;
      // Its consumer cannot be made while NATS is away: not delivering, and the gauge says so.
      await expect.poll(() => lines.some((l) => l.includes("destination could not start; tried again shortly")), { timeout: 15_000 }).toBe(true);
      expect(await up()).toEqual(["default/iota=1", "default/kappa=0"]);
      expect(service.destinations).toEqual(["default/iota"]);
      const reconnected = (async () => {
        for await (const status of own.nc.status()) if (status.type === "reconnect") return;
      })();
      await own.server.restart();
      await reconnected;
      // Stored as soon as NATS is back, before the destination's next try (its consumer, made
      // then, must start from when the destination was added, not from "now").
      const publish = publishTo("kappa", own);
      for (let i = 0; i < 3; i++) await publish(`k-${i}`);
      expect(service.destinations).toEqual(["default/iota"]);
      await ownReceiver.waitFor("/kappa", 3, 40_000);
      expect(ownReceiver.requests("/kappa").map((r) => JSON.parse(r.body.toString()).messageId).sort()).toEqual(["k-0", "k-1", "k-2"]);
      expect(service.destinations.sort()).toEqual(["default/iota", "default/kappa"]);
      expect(await up()).toEqual(["default/iota=1", "default/kappa=1"]);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("counts the dead letters a full dead-letter stream refuses, and says how full it is (found by a review: the messages aged out of the events stream with nothing but a log line)", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    ownReceiver.on("/lambda", answer(404)); // every message is a dead letter at once
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const metrics = new DeliveryMetrics({ defaultMetrics: false });
    const { log, lines } = capturedLog("error");
    const service = await start(new ConfigHolder(configOf([{ name: "lambda", url: ownReceiver.url("/lambda") }])), { on: own, log, metrics, dlqStream: { maxBytes: 2048, replicas: 1 } });
    const sample = async (name: string, labels: Record<string, string>) =>
      (await metrics.registry.getSingleMetric(name)!.get()).values.find((v) => Object.entries(labels).every(([k, want]) => v.labels[k] === want))?.value;
    try {
      const publish = publishTo("lambda", own);
      for (let i = 0; i < 20; i++) await publish(`l-${i}-${"x".repeat(200)}`);
      await expect.poll(() => sample("trackhook_delivery_messages_total", { outcome: "dead_letter_failed", reason: "dead_letter_stream_full" }), { timeout: 15_000 }).toBeGreaterThan(0);
      expect(await sample("trackhook_dead_letter_stream_max_bytes", { stream: "TRACKHOOK_DLQ" })).toBe(2048);
      expect(await sample("trackhook_dead_letter_stream_bytes", { stream: "TRACKHOOK_DLQ" })).toBeGreaterThan(1024);
      // The attempt records of those tries are there too, and how full their stream is (the docs
      // named a series of the dead-letter gauge for it, which was never exported).
      expect(await sample("trackhook_attempts_stream_bytes", { stream: "TRACKHOOK_ATTEMPTS" })).toBeGreaterThan(0);
      expect(await sample("trackhook_attempts_stream_max_bytes", { stream: "TRACKHOOK_ATTEMPTS" })).toBeGreaterThan(0);
      // One line for the lot (every message is refused within the first 10 s), not one each.
      expect(lines.filter((l) => l.includes("TRACKHOOK_DLQ is full"))).toHaveLength(1);
      const line = JSON.parse(lines.find((l) => l.includes("TRACKHOOK_DLQ is full"))!) as Record<string, unknown>;
      expect(line.messageId).toMatch(/^l-\d+-x+$/);
      expect(line.reason).toBe("permanent_failure");
      expect(line.droppedFromStreamInSeconds).toBeGreaterThan(3500);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("a scrape while NATS hangs answers within its budget, and the backlog gauges hold their last figures, the oldest message ageing on (found by reviews: each read waited out its timeout in turn, past the chart's 10 s scrape timeout; then the gauges vanished, and the alerts on them resolved)", { timeout: 60_000 }, async () => {
    const own = await startNats();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    receiver.on("/frozen", answer(503)); // the message waits, retried
    const metrics = new DeliveryMetrics({ defaultMetrics: false });
    const service = await start(new ConfigHolder(configOf([{ name: "frozen", url: receiver.url("/frozen") }])), { on: own, metrics });
    const pid = own.server.pid!;
    const age = (text: string) => Number(/trackhook_delivery_oldest_message_age_seconds\{destination="default\/frozen"\} (\S+)/.exec(text)?.[1]);
    try {
      await publishTo("frozen", own)("f-1");
      await receiver.waitFor("/frozen", 1);
      const before = await metrics.registry.metrics();
      expect(before).toContain('trackhook_delivery_in_flight_messages{destination="default/frozen"} 1');
      await freeze(pid); // a paused VM, a partition: TCP stays up, nothing answers
      await new Promise((r) => setTimeout(r, 1_000));
      const started = Date.now();
      const text = await metrics.registry.metrics();
      expect(Date.now() - started).toBeLessThan(4_500);
      expect(text).toContain('trackhook_delivery_destination_up{destination="default/frozen"} 1'); // the scrape itself is whole
      expect(text).toContain('trackhook_delivery_in_flight_messages{destination="default/frozen"} 1');
      expect(age(text)).toBeGreaterThan(age(before) + 1);
      thaw(pid);
      receiver.on("/frozen", answer(200));
      await expect.poll(async () => await metrics.registry.metrics(), { timeout: 20_000, interval: 500 }).toContain('trackhook_delivery_in_flight_messages{destination="default/frozen"} 0');
    } finally {
      thaw(pid);
      await service.stop();
      await own.stop();
    }
  });

  it("with --dead-letters-per-destination, a destination at its limit has its own dead letters refused, and the others' are still stored (the stream is shared: one tenant refusing everything filled it for all)", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    ownReceiver.on("/hog", answer(404));
    ownReceiver.on("/calm", answer(404));
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const metrics = new DeliveryMetrics({ defaultMetrics: false });
    const { log, lines } = capturedLog("error");
    const config = new ConfigHolder(configOf([{ name: "hog", url: ownReceiver.url("/hog") }, { name: "calm", url: ownReceiver.url("/calm") }]));
    const service = await start(config, { on: own, log, metrics, dlqStream: { maxBytes: 64 * 1024 ** 2, replicas: 1, maxPerDestination: 5 } });
    const stored = async (destination: string) => ((await own.jsm.streams.info(DLQ_STREAM, { subjects_filter: `trackhook.dlq.default.${destination}` })).state.subjects as Record<string, number> | undefined)?.[`trackhook.dlq.default.${destination}`] ?? 0;
    try {
      for (let i = 0; i < 12; i++) await publishTo("hog", own)(`hog-${i}`);
      const refused = () => metrics.registry.getSingleMetric("trackhook_delivery_messages_total")!.get().then((m) => m.values.find((v) => v.labels.destination === "default/hog" && v.labels.reason === "dead_letter_destination_full")?.value ?? 0);
      await expect.poll(refused, { timeout: 15_000 }).toBeGreaterThanOrEqual(7);
      expect(await stored("hog")).toBe(5);
      // The other destination's dead letters are still stored.
      for (let i = 0; i < 2; i++) await publishTo("calm", own)(`calm-${i}`);
      await expect.poll(() => stored("calm"), { timeout: 15_000 }).toBe(2);
      expect(lines.filter((l) => l.includes("as many dead letters as it may keep"))).toHaveLength(1);
      expect((await own.jsm.streams.info(DLQ_STREAM)).config).toMatchObject({ max_msgs_per_subject: 5, discard_new_per_subject: true });
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("started without stream settings (as `trackhook dev` is), leaves an existing dead-letter stream's own settings alone (regression: `dev --nats` on a shared NATS reset them to the defaults)", async () => {
    const own = await startNats();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    await ensureStream(own.jsm, dlqStreamConfig({ maxBytes: 64 * 1024 ** 2, replicas: 1, maxPerDestination: 500 }));
    const service = await start(new ConfigHolder(configOf([])), { on: own });
    try {
      expect((await own.jsm.streams.info(DLQ_STREAM)).config).toMatchObject({ max_bytes: 64 * 1024 ** 2, max_msgs_per_subject: 500, discard_new_per_subject: true });
    } finally {
      await service.stop();
      await own.stop();
    }
  });

  it("keeps the dead-letter and attempts streams' max_age and duplicate window as set by hand, with stream settings or without (found by a DR review: a DLQ kept 30 days for an incident was cut to 14 at the next restart, dropping older dead letters)", async () => {
    const own = await startNats();
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const month = nanos(30 * 24 * 3_600_000);
    await ensureStream(own.jsm, { ...dlqStreamConfig(), max_age: month, duplicate_window: nanos(10 * 60_000) });
    await ensureStream(own.jsm, { ...attemptsStreamConfig(), max_age: month });
    const { log, lines } = capturedLog("warn");
    for (const dlqStream of [undefined, { maxBytes: 2 * 1024 ** 3, replicas: 1 }]) {
      const service = await start(new ConfigHolder(configOf([])), { on: own, log, ...(dlqStream ? { dlqStream } : {}) });
      await service.stop();
    }
    try {
      expect((await own.jsm.streams.info(DLQ_STREAM)).config).toMatchObject({ max_age: month, duplicate_window: nanos(10 * 60_000), max_bytes: 2 * 1024 ** 3 });
      expect((await own.jsm.streams.info(ATTEMPTS_STREAM)).config.max_age).toBe(month);
      expect(lines.filter((l) => l.includes("max_age"))).toEqual([]);
    } finally {
      await own.stop();
    }
  });

  it("a receiver that answers again while the dead-letter stream is full gets the messages waiting for it (found by a review: 0 requests in 150 s, the slots held by dead letters refused)", async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    let up = false;
    ownReceiver.on("/nu", (_req, _n, res) => void res.writeHead(up ? 200 : 503).end(up ? "ok" : "down"));
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const metrics = new DeliveryMetrics({ defaultMetrics: false });
    const refused = async () =>
      (await metrics.registry.getSingleMetric("trackhook_delivery_messages_total")!.get()).values.find((v) => v.labels.outcome === "dead_letter_failed")?.value ?? 0;
    const service = await start(new ConfigHolder(configOf([{ name: "nu", url: ownReceiver.url("/nu"), retryWindow: "2s" }])), {
      // Longer than the window: a refused message comes back past it, where the last chance is.
      on: own, metrics, dlqStream: { maxBytes: 2048, replicas: 1 }, deadLetterRetryMs: 3000,
    });
    try {
      const publish = publishTo("nu", own);
      const ids = Array.from({ length: 20 }, (_, i) => `nu-${i}-${"x".repeat(200)}`);
      for (const id of ids) await publish(id);
      await expect.poll(refused, { timeout: 15_000 }).toBeGreaterThan(0);
      const before = ownReceiver.requests("/nu").length;
      up = true;
      // Every message is either delivered or in the (full) dead-letter stream.
      const received = () => new Set(ownReceiver.requests("/nu").slice(before).map((r) => (JSON.parse(r.body.toString()) as { messageId: string }).messageId));
      const deadLettered = async () => {
        const ids = new Set<string | undefined>();
        for await (const d of readDeadLetters(own.nc, { namespace: "default", destination: "nu" })) ids.add(d.messageId);
        return ids;
      };
      await expect.poll(async () => {
        const dead = await deadLettered();
        return ids.filter((id) => !received().has(id) && !dead.has(id)).length;
      }, { timeout: 20_000, interval: 250 }).toBe(0);
      expect(received().size).toBeGreaterThan(0);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("delivers a new tenant's first messages, stored by an ingest that read the config file before delivery did (found by a review: they never reached the new destination)", async () => {
    const dir = tempDir("new-tenant");
    writeFileSync(join(dir, "tenant.yaml"), `apiVersion: v1
kind: Secret
metadata: { name: mu-key }
stringData: { writeKey: w-mu }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: mu }
spec: { writeKeySecretRef: { name: mu-key, key: writeKey } }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: mu }
spec: { sources: [mu], urls: ["${receiver.url("/mu")}"] }
`);
    await new Promise((r) => setTimeout(r, 20));
    // The ingest has read the file and accepted these; delivery has not read it yet.
    const publish = publishTo("mu");
    for (let i = 0; i < 3; i++) await publish(`mu-${i}`);
    const config = new FileConfigProvider(dir, createLogger({ level: "silent" }));
    const service = await start(config);
    try {
      await receiver.waitFor("/mu", 3, 10_000);
      expect(receiver.requests("/mu").map((r) => JSON.parse(r.body.toString()).messageId).sort()).toEqual(["mu-0", "mu-1", "mu-2"]);
    } finally {
      await service.stop();
      config.close();
    }
  });

  it("takes a rotated shared secret without restarting the destination's worker, so messages in transit are not held for ack_wait (found by a review: 35 s late after a Secret rotation)", async () => {
    const signed = (secret: string) =>
      compileConfig([
        { apiVersion: "v1", kind: "Secret", metadata: { name: "xi-key" }, stringData: { writeKey: "w-xi", shared: secret } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name: "xi" }, spec: { writeKeySecretRef: { name: "xi-key", key: "writeKey" } } },
        {
          apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "xi" },
          spec: { sources: ["xi"], urls: [receiver.url("/xi")], sharedSecretRef: { name: "xi-key", key: "shared" } },
        },
      ].map((body, i) => ({ origin: `doc ${i + 1}`, body })));
    const config = new ConfigHolder(signed("first-secret"));
    const { log, lines } = capturedLog("info");
    const service = await start(config, { log });
    const publish = publishTo("xi");
    const signatureOf = (i: number, secret: string) => createHmac("sha1", secret).update(receiver.requests("/xi")[i]!.body).digest("hex");
    try {
      await publish("xi-1");
      await receiver.waitFor("/xi", 1);
      expect(receiver.requests("/xi")[0]!.headers["x-signature"]).toBe(signatureOf(0, "first-secret"));
      config.set(signed("second-secret"));
      await publish("xi-2");
      await receiver.waitFor("/xi", 2, 5_000);
      expect(receiver.requests("/xi")[1]!.headers["x-signature"]).toBe(signatureOf(1, "second-secret"));
      expect(lines.some((l) => l.includes("shared secret or headers changed; in force for the next requests"))).toBe(true);
      expect(lines.some((l) => l.includes("second-secret") || l.includes("first-secret"))).toBe(false);
    } finally {
      await service.stop();
    }
  });

  it("recovers a consumer lost while a change of its destination's shared secret waits to be applied (found by a review: the change was taken in place, and the consumer stayed lost)", { timeout: 60_000 }, async () => {
    const own = await startNats();
    const ownReceiver = await startReceiver();
    ownReceiver.on("/hangs", () => {}); // never answers: stopping its worker waits for the timeout
    await ensureStream(own.jsm, eventsStreamConfig(DEFAULT_STREAM));
    const docs = (secret: string, hangingPath: string) =>
      compileConfig([
        { apiVersion: "v1", kind: "Secret", metadata: { name: "k" }, stringData: { y: "w-y", z: "w-z", shared: secret } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name: "y" }, spec: { writeKeySecretRef: { name: "k", key: "y" } } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name: "z" }, spec: { writeKeySecretRef: { name: "k", key: "z" } } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "y" }, spec: { sources: ["y"], urls: [ownReceiver.url("/y")], sharedSecretRef: { name: "k", key: "shared" } } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "z" }, spec: { sources: ["z"], urls: [ownReceiver.url(hangingPath)], timeout: "10s" } },
      ].map((body, i) => ({ origin: `doc ${i + 1}`, body })));
    const config = new ConfigHolder(docs("s1", "/hangs"));
    const service = await start(config, { consumerRemovalGraceMs: 0, consumerCheckMs: 300, on: own });
    const publish = (source: string) => publishTo(source, own);
    try {
      await publish("y")("y1");
      await ownReceiver.waitFor("/y", 1);
      await publish("z")("z1");
      await new Promise((r) => setTimeout(r, 500)); // z1 in flight, unanswered
      config.set(docs("s1", "/elsewhere")); // restarts z: waits up to 10 s for z1
      await new Promise((r) => setTimeout(r, 300));
      await own.jsm.consumers.delete(EVENTS_STREAM, "dest_default_y"); // y's consumer deleted under delivery
      await new Promise((r) => setTimeout(r, 7_000)); // the loss confirmed; its recovery waits behind the change
      config.set(docs("s2", "/elsewhere")); // y's shared secret rotated
      await publish("y")("y2");
      await ownReceiver.waitFor("/y", 2, 20_000);
      expect(await own.jsm.consumers.info(EVENTS_STREAM, "dest_default_y").then(() => true, () => false)).toBe(true);
    } finally {
      await service.stop();
      await ownReceiver.close();
      await own.stop();
    }
  });

  it("keeps a fair share of the process's slots free for an idle destination, so a dead one cannot hold them all", async () => {
    receiver.on("/dead", () => {}); // never answers
    const config = new ConfigHolder(configOf([
      { name: "dead", url: receiver.url("/dead"), timeout: "3s", maxInFlight: 100 },
      { name: "healthy", url: receiver.url("/healthy") },
    ]));
    const service = await start(config, { maxInFlight: 4 });
    try {
      for (let i = 0; i < 20; i++) await nats.js.publish("trackhook.events.default.dead.track", JSON.stringify({ type: "track", messageId: `d-${i}`, userId: "u", event: "e" }), { msgID: `default/dead/d-${i}` });
      await receiver.waitFor("/dead", 2);
      const sentAt = Date.now();
      for (let i = 0; i < 5; i++) await nats.js.publish("trackhook.events.default.healthy.track", JSON.stringify({ type: "track", messageId: `h-${i}`, userId: "u", event: "e" }), { msgID: `default/healthy/h-${i}` });
      await receiver.waitFor("/healthy", 5, 2_500); // well before the dead URL's 3 s timeout frees anything
      expect(Date.now() - sentAt).toBeLessThan(2_500);
      expect(receiver.requests("/dead").length).toBe(2); // its share of 4: two
    } finally {
      await service.stop();
    }
  });

  it("two slow destinations cannot starve a third (regression: each took half the process's slots, and the third waited for them, message after message)", async () => {
    // 2xx just before the timeout: never paused, every slot held ~4 s.
    const slow = (_req: unknown, _n: number, res: ServerResponse) => void setTimeout(() => res.writeHead(200).end("ok"), 4_000);
    receiver.on("/slow-1", slow);
    receiver.on("/slow-2", slow);
    const config = new ConfigHolder(configOf([
      { name: "slow-1", url: receiver.url("/slow-1"), timeout: "5s", maxInFlight: 100 },
      { name: "slow-2", url: receiver.url("/slow-2"), timeout: "5s", maxInFlight: 100 },
      { name: "victim", url: receiver.url("/victim") },
    ]));
    const service = await start(config, { maxInFlight: 6 });
    const publish = (source: string, id: string) => publishTo(source)(id);
    try {
      await publish("victim", "v-0");
      await receiver.waitFor("/victim", 1);
      for (let i = 0; i < 30; i++) await Promise.all([publish("slow-1", `s1-${i}`), publish("slow-2", `s2-${i}`)]);
      await receiver.waitFor("/slow-1", 2);
      await receiver.waitFor("/slow-2", 2);
      const sentAt = Date.now();
      for (let i = 1; i <= 5; i++) await publish("victim", `v-${i}`);
      await receiver.waitFor("/victim", 6, 3_500); // before any slow delivery frees a slot
      expect(Date.now() - sentAt).toBeLessThan(3_500);
      // Each slow one holds its fair share of 6 (two) and nothing more while the victim is active.
      expect(receiver.requests("/slow-1").length + receiver.requests("/slow-2").length).toBe(4);
    } finally {
      await service.stop();
    }
  });
});
