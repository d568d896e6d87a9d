// Losing one node of a 3-node JetStream cluster (replicas 3), as production runs it. Regressions
// from a review on such a cluster, where every message was kept but the cluster's other two nodes
// were not used for a minute or more, without a word:
// - a node frozen with its sockets open (SIGSTOP: a paused VM, a partition) took down ingest for
//   minutes: the client's pings came every 2 minutes;
// - a replica whose config watch's consumer was on a killed node kept its old config for 60-90 s;
// - a destination whose consumer and stream were led by a killed node delivered nothing for 35-45 s.
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { afterEach, describe, expect, it } from "vitest";
import { streamSettings } from "../../cli/commands/shared-flags.ts";
import { CONFIG_BUCKET, ConfigHolder, ConfigWriter, KvConfigProvider, compileConfig, ensureConfigBucket, sha256Hex, sourceKey } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender } from "../../dataplane/delivery/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { EVENTS_STREAM, connectNats, consumerName, eventsStreamConfig } from "../../dataplane/nats/mod.ts";
import { freeze, thaw } from "../harness/freeze.ts";
import { startNatsCluster, type NatsClusterHarness } from "../harness/nats.ts";
import { startReceiver, type Receiver } from "../harness/receiver.ts";

let cluster: NatsClusterHarness | undefined;
let receiver: Receiver | undefined;
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await receiver?.close();
  receiver = undefined;
  await cluster?.stop();
  cluster = undefined;
});

const lines: Array<Record<string, unknown>> = [];
const log = createLogger({ level: "info", destination: { write: (line) => void lines.push(JSON.parse(line)) } });
const said = (msg: string) => lines.filter((l) => typeof l.msg === "string" && l.msg.startsWith(msg));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A connection as trackhook's processes make them, to one server of the cluster first. */
async function connectTo(url: string) {
  const nc = await connectNats({ servers: url, name: "node-loss", log });
  cleanups.push(() => nc.close().catch(() => {}));
  return nc;
}

const nodeIndex = (serverName: string) => Number(serverName.split("-n")[1]) - 1;

describe("losing a NATS node", () => {
  it("a node frozen with its sockets open is left for another within seconds (regression: 503 for minutes)", async () => {
    cluster = await startNatsCluster(3);
    await cluster.ensureStream(eventsStreamConfig(streamSettings({ "stream-replicas": "3" })));
    const frozen = cluster.servers[1]!;
    const js = jetstream(await connectTo(frozen.url), { timeout: 1000 });
    const store = (id: string) => js.publish("trackhook.events.default.web.track", "{}", { msgID: id });
    // The stream's subjects reach this node's routing a moment after the stream is made on another
    // (a CI run's first publish had "no responders"): stored once before the freeze, whenever it can.
    await expect.poll(() => store("before").then(() => true, () => false), { timeout: 10_000, interval: 100 }).toBe(true);
    await freeze(frozen.pid!);
    cleanups.push(() => thaw(frozen.pid!));
    const frozenAt = Date.now();
    let n = 0;
    await expect.poll(() => store(`during-${n++}`).then(() => true, () => false), { timeout: 40_000, interval: 200 }).toBe(true);
    // Two pings unanswered (3 s apart), a reconnect (maybe a 5 s try of the frozen node first),
    // maybe a stream leader election: ~9-17 s; the old client was still failing at 40 s.
    expect(Date.now() - frozenAt).toBeLessThan(30_000);
  }, 150_000);

  it("a config watch whose consumer's node is killed follows changes again within seconds, and says so (regression: 60-90 s of old config)", async () => {
    cluster = await startNatsCluster(3);
    const writer = new ConfigWriter(await ensureConfigBucket(cluster.nc, { replicas: 3 }));
    const source = (name: string) => ({ namespace: "default", name, enabled: true, writeKeySha256: sha256Hex(name) });
    await writer.put(sourceKey("default", "a"), source("a"));
    // Watches from a client of the first node, until one's consumer sits on another node (JetStream
    // places each watch's consumer on a node of the bucket's; ~45% of them on the client's own).
    const nc = await connectTo(cluster.servers[0]!.url);
    const watchers: Array<{ provider: KvConfigProvider; consumers: string[] }> = [];
    let victim: { index: number; watcher: (typeof watchers)[number] } | undefined;
    while (!victim && watchers.length < 12) {
      const kv = await new Kvm(nc).open(CONFIG_BUCKET);
      const consumers: string[] = [];
      const watch = kv.watch.bind(kv);
      // Which consumer is whose, to kill a node that holds one of them.
      kv.watch = async (options) => {
        const iterator = await watch(options);
        consumers.push((iterator as unknown as { _data: { name: string } })._data.name);
        return iterator;
      };
      const provider = await KvConfigProvider.start(nc, log, { part: "sources", kv });
      cleanups.push(() => provider.close());
      watchers.push({ provider, consumers });
      for await (const c of cluster.jsm.consumers.list(`KV_${CONFIG_BUCKET}`)) {
        const index = nodeIndex(c.cluster!.leader!);
        const watcher = watchers.find((w) => w.consumers.includes(c.name));
        if (index !== 0 && watcher) victim = { index, watcher };
      }
    }
    expect(victim, "a watch's consumer on a node other than the client's").toBeDefined();
    await cluster.servers[victim!.index]!.kill("SIGKILL");
    const killedAt = Date.now();
    // The bucket elects a leader if it has to; then a Source is added.
    await expect.poll(() => writer.put(sourceKey("default", "b"), source("b")).then(() => true, () => false), { timeout: 20_000, interval: 500 }).toBe(true);
    await expect.poll(() => victim!.watcher.provider.current().sources.some((s) => s.name === "b"), { timeout: 60_000, interval: 200 }).toBe(true);
    // Two looks 5 s apart that find it missing or silent (each may wait 5 s), a restart: the old
    // code took 60-90 s.
    expect(Date.now() - killedAt).toBeLessThan(35_000);
    expect(said("the config watch lost its NATS consumer").length).toBeGreaterThan(0);
    // Every watch has it, none lost the entry it had.
    for (const { provider } of watchers) expect(provider.current().sources.map((s) => s.name).sort()).toEqual(["a", "b"]);
  }, 180_000);

  it("delivery goes on within seconds after the node leading its consumer and the stream is killed, and says so (regression: 35-45 s, silently)", async () => {
    cluster = await startNatsCluster(3);
    await cluster.ensureStream(eventsStreamConfig(streamSettings({ "stream-replicas": "3" })));
    receiver = await startReceiver();
    const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "test" });
    cleanups.push(() => sender.close());
    const config = compileConfig([
      { apiVersion: "v1", kind: "Secret", metadata: { name: "key" }, stringData: { writeKey: "w-hop" } },
      { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name: "hop" }, spec: { writeKeySecretRef: { name: "key", key: "writeKey" } } },
      { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "hop" }, spec: { sources: ["hop"], urls: [receiver.url("/hop")] } },
    ].map((body, i) => ({ origin: `doc ${i + 1}`, body })));
    const delivery = await DeliveryService.start({
      nc: await connectTo(cluster.servers[0]!.url), config: new ConfigHolder(config), sender, log,
      metrics: new DeliveryMetrics({ defaultMetrics: false }), dlqStream: { maxBytes: 64 * 1024 ** 2, replicas: 3 }, attemptsStream: { maxBytes: 64 * 1024 ** 2, replicas: 3 },
    });
    cleanups.push(() => delivery.stop());
    const js = jetstream(cluster.nc, { timeout: 1000 });
    const publish = (id: string) => js.publish("trackhook.events.default.hop.track", JSON.stringify({ type: "track", messageId: id, userId: "u", event: "e" }), { msgID: `default/hop/${id}` });
    const arrived = (id: string) => receiver!.requests("/hop").some((r) => (JSON.parse(r.body.toString()) as { messageId: string }).messageId === id);
    await publish("before");
    await expect.poll(() => arrived("before"), { timeout: 10_000 }).toBe(true);
    // The consumer and the stream led by one node, not the one delivery is connected to.
    const consumer = consumerName("default", "hop");
    const leaders = async () => ({ stream: (await cluster!.jsm.streams.info(EVENTS_STREAM)).cluster!.leader!, consumer: (await cluster!.jsm.consumers.info(EVENTS_STREAM, consumer)).cluster!.leader! });
    for (let moves = 0; ; moves++) {
      const { stream, consumer: led } = await leaders();
      if (led === stream && nodeIndex(led) !== 0) break;
      expect(moves, "leaders moved onto one node").toBeLessThan(20);
      const stepdown = nodeIndex(stream) === 0 ? `$JS.API.STREAM.LEADER.STEPDOWN.${EVENTS_STREAM}` : `$JS.API.CONSUMER.LEADER.STEPDOWN.${EVENTS_STREAM}.${consumer}`;
      await cluster.nc.request(stepdown, undefined, { timeout: 5000 }).catch(() => {});
      await sleep(1500);
    }
    await sleep(1000); // a pull waiting at the leader
    await cluster.servers[nodeIndex((await leaders()).consumer)]!.kill("SIGKILL");
    const killedAt = Date.now();
    const stored: string[] = [];
    for (let n = 0; !stored.some(arrived); n++) {
      expect(Date.now() - killedAt, "a message delivered after the kill").toBeLessThan(60_000);
      const id = `after-${n}`;
      await publish(id).then(() => stored.push(id), () => {});
      await sleep(250);
    }
    expect(Date.now() - killedAt).toBeLessThan(25_000);
    // Said when it stopped and when it went on (more than once if the election took two rounds).
    const told = lines.filter((l) => l.destination === "default/hop").map((l) => l.msg as string).filter((msg) => /^(no heartbeat|pulling from)/.test(msg));
    expect(told[0]).toMatch(/^no heartbeat from this destination's NATS consumer/);
    expect(told.at(-1)).toMatch(/^pulling from this destination's NATS consumer again/);
  }, 180_000);
});
