// The first delivery on a NATS, with the config from files (deliver --config, dev): what the
// ingest stored before delivery first ran goes to every destination in the files then, whichever
// delivery process makes its consumer and whenever; a destination added later, or enabled again,
// starts when it is read. Each test has a fresh NATS (a "first delivery" needs one).
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ConfigHolder, compileConfig } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender } from "../../dataplane/delivery/mod.ts";
import { createLogger, type Logger } from "../../dataplane/logging.ts";
import { DEFAULT_SIDE_STREAM, DLQ_STREAM, EVENTS_STREAM, consumerName, ensureStream, eventsStreamConfig, isConsumerNotFound } from "../../dataplane/nats/mod.ts";
import { DEFAULT_STREAM } from "../harness/ingest.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";
import { answer, startReceiver, type Receiver } from "../harness/receiver.ts";

let nats: NatsHarness;
let receiver: Receiver;
const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "test" });
beforeAll(async () => void (receiver = await startReceiver()));
afterAll(async () => {
  await sender.close();
  await receiver?.close();
});
beforeEach(async () => {
  nats = await startNats();
  await ensureStream(nats.jsm, eventsStreamConfig(DEFAULT_STREAM));
});
afterEach(async () => nats?.stop());

/** Destinations named `<prefix>-<i>`, each with a URL of its own, reading the sources given (default: `web`). */
function configOf(names: string[], options: { disabled?: string[]; sourcesOf?: (name: string) => string[] } = {}) {
  const sourcesOf = options.sourcesOf ?? (() => ["web"]);
  const sources = [...new Set(names.flatMap(sourcesOf))];
  return compileConfig(
    [
      ...sources.flatMap((name) => [
        { apiVersion: "v1", kind: "Secret", metadata: { name: `${name}-key` }, stringData: { writeKey: `w-${name}` } },
        { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name }, spec: { writeKeySecretRef: { name: `${name}-key`, key: "writeKey" } } },
      ]),
      ...names.map((name) => ({
        apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name },
        spec: { sources: sourcesOf(name), urls: [receiver.url(`/${name}`)], ...(options.disabled?.includes(name) ? { enabled: false } : {}) },
      })),
    ].map((body, i) => ({ origin: `doc ${i + 1}`, body })),
  );
}

/** A delivery process with the config from files; `starting` is given the service before its destinations start. */
const start = async (
  config: ConfigHolder,
  options: { log?: Logger; consumerRemovalGraceMs?: number; starting?: (service: DeliveryService) => void; attemptsMaxBytes?: number } = {},
) =>
  DeliveryService.start({
    nc: await nats.connect(), config, sender, configFromFiles: true,
    ...(options.attemptsMaxBytes ? { attemptsStream: { ...DEFAULT_SIDE_STREAM, maxBytes: options.attemptsMaxBytes, defaulted: [] } } : {}),
    log: options.log ?? createLogger({ level: "silent" }), metrics: new DeliveryMetrics({ defaultMetrics: false }),
    consumerRemovalGraceMs: options.consumerRemovalGraceMs ?? 0,
    ...(options.starting ? { starting: options.starting } : {}),
  });

/** A `starting` option that does `then` once `when` holds while the service starts; `done()` is when it has. */
function whileStarting(when: (service: DeliveryService) => Promise<boolean> | boolean, then: (service: DeliveryService) => unknown) {
  let done: Promise<void> = Promise.resolve();
  return {
    starting: (service: DeliveryService) => {
      done = (async () => {
        await expect.poll(() => when(service), { timeout: 10_000, interval: 1 }).toBe(true);
        await then(service);
      })();
    },
    done: () => done,
  };
}

/** Stores track messages of a source, as ingest would. */
const store = (source: string, ids: string[]) =>
  Promise.all(ids.map((id) => nats.js.publish(`trackhook.events.default.${source}.track`, JSON.stringify({ type: "track", messageId: id, userId: "u", event: "e" }), { msgID: `default/${source}/${id}` })));

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
const received = (name: string) => receiver.requests(`/${name}`).map((r) => JSON.parse(r.body.toString()).messageId as string);
const consumerExists = (name: string) =>
  nats.jsm.consumers.info(EVENTS_STREAM, consumerName("default", name)).then(() => true, (err: unknown) => {
    if (isConsumerNotFound(err)) return false;
    throw err;
  });

/** Waits until every destination has received exactly `expected` (no message missing, none twice). */
async function expectEachReceived(names: string[], expected: string[], timeout = 20_000): Promise<void> {
  await expect.poll(() => names.filter((n) => received(n).length < expected.length), { timeout }).toEqual([]);
  await new Promise((r) => setTimeout(r, 300)); // anything sent twice would arrive by now
  for (const name of names) expect({ name, got: received(name).sort() }).toEqual({ name, got: [...expected].sort() });
}

describe("the first delivery on a NATS, with the config from files", () => {
  it("gives what was stored before to every destination when two processes start together (found by a review: the second made 66 of 100 consumers from its own start)", async () => {
    const names = ids("pair", 40);
    const backlog = ids("before", 10);
    await store("web", backlog);
    const first = start(new ConfigHolder(configOf(names)));
    // The second starts once the first has made a consumer: it is not the first delivery for it.
    await expect.poll(() => consumerExists(names[0]!), { timeout: 10_000, interval: 5 }).toBe(true);
    const second = start(new ConfigHolder(configOf(names)));
    const [a, b] = await Promise.all([first, second]);
    try {
      await expectEachReceived(names, backlog);
    } finally {
      await a.stop();
      await b.stop();
    }
  });

  it("gives what was stored before to the destinations a process stopped while starting had not reached, when it starts again (found by a review: 34 of 40 skipped)", { timeout: 60_000 }, async () => {
    const names = ids("halt", 40);
    const backlog = ids("before", 10);
    await store("web", backlog);
    // Stopped (a SIGTERM, a deploy) once its first consumers are made.
    const stopping = whileStarting(() => consumerExists(names[2]!), (service) => service.stop());
    const stopped = await start(new ConfigHolder(configOf(names)), { starting: stopping.starting });
    await stopped.stop();
    await stopping.done();
    const made = (await Promise.all(names.map(consumerExists))).filter(Boolean).length;
    expect(made).toBeGreaterThan(0);
    expect(made).toBeLessThan(names.length); // stopped halfway, or this test proves nothing
    const again = await start(new ConfigHolder(configOf(names)));
    try {
      // A pull's messages still on their way when a worker stops wait out ack_wait (35 s).
      await expectEachReceived(names, backlog, 45_000);
    } finally {
      await again.stop();
    }
  });

  it("gives what was stored before to every destination though the attempts stream, full, drops the marks (found by a review: 286 of 300 skipped on a 64 KiB stream)", async () => {
    const names = ids("small", 60);
    const backlog = ids("before", 20);
    await store("web", backlog);
    // 1,200 attempt records are several times what the stream keeps: the marks are its oldest.
    const service = await start(new ConfigHolder(configOf(names)), { attemptsMaxBytes: 64 * 1024 });
    try {
      await expectEachReceived(names, backlog);
    } finally {
      await service.stop();
    }
  });

  it("delivers to a destination added while the others start (found by a review: never started, until another change)", async () => {
    const names = ids("busy", 40);
    const config = new ConfigHolder(configOf(names));
    // Added once the first workers run, while the rest start.
    const adding = whileStarting((starting) => starting.destinations.length > 0, () => config.set(configOf([...names, "added"])));
    const service = await start(config, { starting: adding.starting });
    try {
      await adding.done();
      await expect.poll(() => service.destinations.includes("default/added"), { timeout: 10_000 }).toBe(true);
      await store("web", ["after"]);
      await expectEachReceived(["added"], ["after"]);
    } finally {
      await service.stop();
    }
  });

  it("makes no consumer for a destination dropped from the files while the first start makes the others (found by a review: kept for good, nobody's to remove)", async () => {
    const names = ids("drop", 60);
    const config = new ConfigHolder(configOf(names));
    const dropping = whileStarting(() => consumerExists(names[0]!), () => config.set(configOf(names.slice(0, -1))));
    const service = await start(config, { starting: dropping.starting });
    try {
      await dropping.done();
      await expect.poll(() => service.destinations.length, { timeout: 10_000 }).toBe(names.length - 1);
      // Removed at once (no grace here) if it was made at all.
      await expect.poll(() => consumerExists(names.at(-1)!), { timeout: 5_000 }).toBe(false);
    } finally {
      await service.stop();
    }
  });

  it("starts a destination added later when it is read, and one of the first, disabled past the grace and enabled again, from then (found by a review: what was stored meanwhile sent)", async () => {
    const sourcesOf = (name: string) => [name === "quiet" ? "other" : "web"];
    await store("web", ["w-before"]);
    const config = new ConfigHolder(configOf(["loud", "quiet"], { sourcesOf }));
    const service = await start(config);
    try {
      await expectEachReceived(["loud"], ["w-before"]);
      // quiet had nothing to deliver (no attempt record): disabled, its consumer removed at once (no grace here).
      config.set(configOf(["loud", "quiet"], { sourcesOf, disabled: ["quiet"] }));
      await expect.poll(() => consumerExists("quiet"), { timeout: 10_000 }).toBe(false);
      await store("other", ["o-while-disabled"]);
      config.set(configOf(["loud", "quiet", "later"], { sourcesOf }));
      await expect.poll(() => service.destinations.sort()).toEqual(["default/later", "default/loud", "default/quiet"]);
      await store("other", ["o-after"]);
      await store("web", ["w-after"]);
      await expectEachReceived(["quiet"], ["o-after"]);
      await expectEachReceived(["later"], ["w-after"]);
      await expectEachReceived(["loud"], ["w-before", "w-after"]);
    } finally {
      await service.stop();
    }
  });

  it("says once, by the process that removed it, what a destination two processes drop at once had not delivered (found by a review: 37 lines for 20 consumers, an erasure reported moved three times)", async () => {
    receiver.on("/failing", answer(500));
    const captured = () => {
      const lines: string[] = [];
      return { lines, log: createLogger({ level: "info", destination: { write: (line) => void lines.push(line) } }) };
    };
    const [x, y] = [captured(), captured()];
    const [cx, cy] = [new ConfigHolder(configOf(["failing"])), new ConfigHolder(configOf(["failing"]))];
    const a = await start(cx, { log: x.log, consumerRemovalGraceMs: 300 });
    const b = await start(cy, { log: y.log, consumerRemovalGraceMs: 300 });
    try {
      await nats.js.publish("trackhook.events.default.web.delete", JSON.stringify({ type: "delete", userId: "u9", messageId: "erase-1", timestamp: new Date().toISOString(), context: {} }), { msgID: "default/web/erase-1" });
      await expect.poll(() => receiver.requests("/failing").length, { timeout: 10_000 }).toBeGreaterThan(0);
      cx.set(configOf([]));
      cy.set(configOf([]));
      await expect.poll(() => consumerExists("failing"), { timeout: 10_000 }).toBe(false);
      await new Promise((r) => setTimeout(r, 500)); // both have had their say
      const all = [...x.lines, ...y.lines];
      expect(all.filter((l) => l.includes("not yet delivered: moved to the dead-letter queue")).map((l) => JSON.parse(l).deleteNotifications)).toEqual([1]);
      expect(all.filter((l) => l.includes('"msg":"removed consumers of destinations no longer enabled'))).toHaveLength(1);
      expect((await nats.jsm.streams.info(DLQ_STREAM)).state.messages).toBe(1);
    } finally {
      await a.stop();
      await b.stop();
    }
  });

  it("says nothing of messages not delivered when another process removed the consumer first (found by a review: 'undelivered: unknown')", async () => {
    const lines: string[] = [];
    const log = createLogger({ level: "info", destination: { write: (line) => void lines.push(line) } });
    await store("web", ["m-1"]);
    const config = new ConfigHolder(configOf(["gone"]));
    const service = await start(config, { log, consumerRemovalGraceMs: 500 });
    try {
      await expectEachReceived(["gone"], ["m-1"]);
      config.set(configOf([]));
      // The other process's removal, within the grace.
      await nats.jsm.consumers.delete(EVENTS_STREAM, consumerName("default", "gone"));
      await expect.poll(() => lines.some((l) => l.includes("already removed (by another delivery process")), { timeout: 5_000 }).toBe(true);
      expect(lines.filter((l) => l.includes("had not delivered"))).toEqual([]);
    } finally {
      await service.stop();
    }
  });
});
