// trackhook on a 3-node JetStream cluster with replicas 3, as production runs it. Regressions from
// a review on such a cluster: every change of a consumer's leader stopped its delivery for 30-45 s,
// silently; a process started without --stream-replicas took replicas-3 streams down to one copy.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigHolder, compileConfig } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender } from "../../dataplane/delivery/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { DLQ_STREAM, EVENTS_STREAM, attemptsStreamConfig, consumerName, dlqStreamConfig, ensureStream, eventsStreamConfig, keptSettings, streamReadiness } from "../../dataplane/nats/mod.ts";
import { streamSettings } from "../../cli/commands/shared-flags.ts";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { startNatsCluster, type NatsClusterHarness } from "../harness/nats.ts";
import { startReceiver, type Receiver } from "../harness/receiver.ts";

const SIDE_STREAM = { maxBytes: 64 * 1024 ** 2, replicas: 3 };
let cluster: NatsClusterHarness;
let receiver: Receiver;
const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "test" });
beforeAll(async () => {
  cluster = await startNatsCluster(3);
  // Made here, so that delivery's start (5 s API timeout) finds them.
  for (const stream of [eventsStreamConfig(streamSettings({ "stream-replicas": "3" })), dlqStreamConfig(SIDE_STREAM), attemptsStreamConfig(SIDE_STREAM)]) await cluster.ensureStream(stream);
  receiver = await startReceiver();
}, 200_000);
afterAll(async () => {
  await sender.close();
  await receiver?.close();
  await cluster?.stop();
});

const config = (name: string) =>
  compileConfig([
    { apiVersion: "v1", kind: "Secret", metadata: { name: "key" }, stringData: { writeKey: `w-${name}` } },
    { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name }, spec: { writeKeySecretRef: { name: "key", key: "writeKey" } } },
    { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name }, spec: { sources: [name], urls: [receiver.url(`/${name}`)] } },
  ].map((body, i) => ({ origin: `doc ${i + 1}`, body })));

describe("on a 3-node cluster", () => {
  it("delivery goes on within seconds after its consumer's leader changes (regression: 30-45 s without a delivery)", async () => {
    const delivery = await DeliveryService.start({
      nc: await cluster.connect(), config: new ConfigHolder(config("hop")), sender, log: createLogger({ level: "silent" }),
      metrics: new DeliveryMetrics({ defaultMetrics: false }), dlqStream: SIDE_STREAM, attemptsStream: SIDE_STREAM,
    });
    const js = jetstream(cluster.nc);
    const publish = (id: string) => js.publish("trackhook.events.default.hop.track", JSON.stringify({ type: "track", messageId: id, userId: "u", event: "e" }), { msgID: `default/hop/${id}` });
    const arrived = (id: string) => receiver.requests("/hop").some((r) => (JSON.parse(r.body.toString()) as { messageId: string }).messageId === id);
    try {
      await publish("before");
      await expect.poll(() => arrived("before"), { timeout: 10_000 }).toBe(true);
      // Give the worker time to wait in a pull at the current leader.
      await new Promise((r) => setTimeout(r, 1000));
      const consumer = consumerName("default", "hop");
      const leaderBefore = (await cluster.jsm.consumers.info(EVENTS_STREAM, consumer)).cluster?.leader;
      const stepdown = await cluster.nc.request(`$JS.API.CONSUMER.LEADER.STEPDOWN.${EVENTS_STREAM}.${consumer}`, undefined, { timeout: 5000 });
      expect(stepdown.json()).toMatchObject({ success: true });
      const movedAt = Date.now();
      await publish("after");
      await expect.poll(() => arrived("after"), { timeout: 40_000, interval: 100 }).toBe(true);
      // Two missed heartbeats (5 s) and an election: well under the 30 s of nats.js's defaults.
      expect(Date.now() - movedAt).toBeLessThan(15_000);
      expect((await cluster.jsm.consumers.info(EVENTS_STREAM, consumer)).cluster?.leader).not.toBe(leaderBefore);
    } finally {
      await delivery.stop();
    }
  }, 60_000);

  it("a process without replica or size flags leaves the streams' own settings (regression: took them to one replica)", async () => {
    const before = await cluster.jsm.streams.info(EVENTS_STREAM);
    expect(before.config.num_replicas).toBe(3);
    const defaults = streamSettings({});
    const changes: unknown[] = [];
    await ensureStream(cluster.jsm, eventsStreamConfig(defaults), (c) => changes.push(...c), keptSettings(defaults.defaulted));
    expect(changes).toEqual([]);
    expect((await cluster.jsm.streams.info(EVENTS_STREAM)).config.num_replicas).toBe(3);
    // The dead-letter stream too: a deliver without --stream-replicas.
    const delivery = await DeliveryService.start({
      nc: await cluster.connect(), config: new ConfigHolder(config("plain")), sender, log: createLogger({ level: "silent" }),
      metrics: new DeliveryMetrics({ defaultMetrics: false }), dlqStream: { maxBytes: 1024 ** 3, replicas: 1, defaulted: ["replicas", "maxBytes"] },
    });
    await delivery.stop();
    expect((await cluster.jsm.streams.info(DLQ_STREAM)).config.num_replicas).toBe(3);
    // Asked for explicitly, a setting is applied, and said.
    const asked = streamSettings({ "stream-max-age": "96h", "stream-replicas": "3" });
    await ensureStream(cluster.jsm, eventsStreamConfig(asked), (c) => changes.push(...c), keptSettings(asked.defaulted));
    expect(changes).toEqual([{ setting: "max_age", from: before.config.max_age, to: 96 * 3600 * 1e9 }]);
  }, 60_000);

  // Last: it takes the cluster's quorum away, then gives it back.
  it("readiness says not ready while the events stream has no leader (regression: ready while every write failed)", async () => {
    const jsm = await jetstreamManager(cluster.nc, { timeout: 1000, checkAPI: false });
    expect(await streamReadiness(jsm, EVENTS_STREAM)).toEqual({ ready: true });
    const [, second, third] = cluster.servers;
    await Promise.all([second!.kill("SIGKILL"), third!.kill("SIGKILL")]);
    try {
      await expect.poll(() => streamReadiness(jsm, EVENTS_STREAM), { timeout: 20_000, interval: 500 }).toMatchObject({ ready: false, reason: expect.stringMatching(/no leader/) });
    } finally {
      await Promise.all([second!.restart(), third!.restart()]);
    }
    await expect.poll(() => streamReadiness(jsm, EVENTS_STREAM), { timeout: 30_000, interval: 500 }).toEqual({ ready: true });
  }, 90_000);
});
