// TRACKHOOK_EVENTS is created with the settings of DESIGN.md, and updated in place when an
// existing stream's settings differ (a new max_bytes, say), keeping its messages.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../dataplane/logging.ts";
import { DLQ_STREAM, EVENTS_STREAM, StreamGuard, StreamIsMirrorError, consumerName, dlqStreamConfig, ensureStream, eventsStreamConfig, isConsumerNotFound, isStreamNotFound, keptSettings, type StreamSettingChange } from "../../dataplane/nats/mod.ts";
import { streamSettings } from "../../cli/commands/shared-flags.ts";
import { coldBackup, startNats, type NatsHarness } from "../harness/nats.ts";
import { ensureDestinationConsumer, removeDestinationConsumers } from "../../dataplane/delivery/mod.ts";

let nats: NatsHarness;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats?.stop();
});

const settings = { maxAgeMs: 72 * 3_600_000, maxBytes: 1024 ** 3, duplicateWindowMs: 10 * 60_000, replicas: 1 };
const NS_PER_MS = 1_000_000;

describe("events stream", () => {
  it("is created with limits retention, file storage, discard new, max_age, max_bytes and the duplicate window", async () => {
    await ensureStream(nats.jsm, eventsStreamConfig(settings));
    const { config } = await nats.jsm.streams.info(EVENTS_STREAM);
    expect(config).toMatchObject({
      name: "TRACKHOOK_EVENTS",
      subjects: ["trackhook.events.>", "trackhook.replay.>"],
      retention: "limits",
      storage: "file",
      discard: "new",
      max_age: settings.maxAgeMs * NS_PER_MS,
      max_bytes: settings.maxBytes,
      duplicate_window: settings.duplicateWindowMs * NS_PER_MS,
      num_replicas: 1,
    });
  });

  it("is updated in place when settings change, keeping its messages, and says what changes (the processes log it)", async () => {
    await nats.js.publish("trackhook.events.default.web.track", "{}", { msgID: "default/web/keep-me" });
    const told: StreamSettingChange[][] = [];
    await ensureStream(nats.jsm, eventsStreamConfig({ ...settings, maxBytes: 2 * 1024 ** 3, duplicateWindowMs: 60_000 }), (changes) => told.push(changes));
    expect(told).toEqual([[
      { setting: "max_bytes", from: 1024 ** 3, to: 2 * 1024 ** 3 },
      { setting: "duplicate_window", from: settings.duplicateWindowMs * NS_PER_MS, to: 60_000 * NS_PER_MS },
    ]]);
    const info = await nats.jsm.streams.info(EVENTS_STREAM);
    expect(info.config.max_bytes).toBe(2 * 1024 ** 3);
    expect(info.config.duplicate_window).toBe(60_000 * NS_PER_MS);
    expect(info.state.messages).toBe(1);
  });

  it("is left alone when nothing changed, and nothing is told", async () => {
    const before = await nats.jsm.streams.info(EVENTS_STREAM);
    let told = 0;
    await ensureStream(nats.jsm, eventsStreamConfig({ ...settings, maxBytes: 2 * 1024 ** 3, duplicateWindowMs: 60_000 }), () => told++);
    expect(told).toBe(0);
    const after = await nats.jsm.streams.info(EVENTS_STREAM);
    expect(after.config).toEqual(before.config);
    expect(after.created).toBe(before.created);
  });

  it("keeps a window within max_age when one of them is the stream's own (regression: a flag left out crashed the start: duplicates window larger than max age)", async () => {
    const ensure = async (flags: Parameters<typeof streamSettings>[0]) => {
      const wanted = streamSettings(flags);
      await ensureStream(nats.jsm, eventsStreamConfig(wanted), undefined, keptSettings(wanted.defaulted));
      return (await nats.jsm.streams.info(EVENTS_STREAM)).config;
    };
    const HOUR_NS = 3_600_000 * NS_PER_MS;
    expect(await ensure({ "duplicate-window": "2h" })).toMatchObject({ duplicate_window: 2 * HOUR_NS, max_age: settings.maxAgeMs * NS_PER_MS });
    // Only a shorter max_age given: the window kept from the stream would exceed it.
    expect(await ensure({ "stream-max-age": "1h" })).toMatchObject({ max_age: HOUR_NS, duplicate_window: HOUR_NS });
    // Only a longer window given: the max_age kept from the stream bounds it.
    expect(await ensure({ "duplicate-window": "3h" })).toMatchObject({ max_age: HOUR_NS, duplicate_window: HOUR_NS });
    await ensure({ "stream-max-age": "72h", "duplicate-window": "10m" });
  });
});

describe("a stream that exists as a mirror", () => {
  it("is a clear error naming what it mirrors, not JetStream's \"stream mirrors can not contain subjects\" (found by a DR review: a stack trace at every start)", async () => {
    const moving = await startNats();
    try {
      await moving.jsm.streams.add({ name: "OLD_EVENTS", subjects: ["old.>"] });
      await moving.jsm.streams.add({ name: EVENTS_STREAM, mirror: { name: "OLD_EVENTS" } });
      const err = await ensureStream(moving.jsm, eventsStreamConfig(settings)).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(StreamIsMirrorError);
      expect((err as Error).message).toMatch(/^TRACKHOOK_EVENTS on this NATS is a mirror of OLD_EVENTS: trackhook stores into it, which a mirror cannot take/);
      expect((await moving.jsm.streams.info(EVENTS_STREAM)).config.mirror?.name).toBe("OLD_EVENTS"); // left as it was
    } finally {
      await moving.stop();
    }
  });
});

describe("not-found errors", () => {
  it("tell a missing stream from a missing consumer, as nats-server reports them", async () => {
    await ensureStream(nats.jsm, eventsStreamConfig(settings));
    const noStream = await nats.jsm.streams.info("TRACKHOOK_NO_SUCH_STREAM").catch((err: unknown) => err);
    expect(isStreamNotFound(noStream)).toBe(true);
    expect(isConsumerNotFound(noStream)).toBe(false);
    const noConsumer = await nats.jsm.consumers.info(EVENTS_STREAM, "no-such-consumer").catch((err: unknown) => err);
    expect(isConsumerNotFound(noConsumer)).toBe(true);
    expect(isStreamNotFound(noConsumer)).toBe(false);
  });
});

describe("destination consumers", () => {
  it("can be ensured by several processes at once (the operator and every delivery pod)", async () => {
    await ensureStream(nats.jsm, eventsStreamConfig(settings));
    const destination = {
      namespace: "default", name: "racy", enabled: true, sources: ["web"], urls: ["https://hooks.example.com/in"], headers: [],
      timeoutMs: 5000, retryWindowMs: 60_000, maxInFlight: 10, standardWebhooks: false, createdAt: new Date().toISOString(),
    };
    const names = await Promise.all([1, 2, 3, 4].map(() => ensureDestinationConsumer(nats.jsm, destination)));
    expect(new Set(names)).toEqual(new Set([consumerName("default", "racy")]));
    expect((await nats.jsm.consumers.info(EVENTS_STREAM, names[0]!)).config.deliver_policy).toBe("by_start_time");
  });

  it("say which call made the consumer: one asking for another start than the one made is told nothing (two replicas recreating a deleted consumer)", async () => {
    await ensureStream(nats.jsm, eventsStreamConfig(settings));
    const destination = {
      namespace: "default", name: "claimed", enabled: true, sources: ["web"], urls: ["https://hooks.example.com/in"], headers: [],
      timeoutMs: 5000, retryWindowMs: 60_000, maxInFlight: 10, standardWebhooks: false,
    };
    const made: number[] = [];
    await ensureDestinationConsumer(nats.jsm, destination, { resumeAt: { seq: 5 }, onCreated: () => made.push(5) });
    await ensureDestinationConsumer(nats.jsm, destination, { resumeAt: { seq: 9 }, onCreated: () => made.push(9) });
    expect(made).toEqual([5]);
    expect((await nats.jsm.consumers.info(EVENTS_STREAM, consumerName("default", "claimed"))).config.opt_start_seq).toBe(5);
  });

  it("made again for a destination delivering since before its events stream was made (a NATS store lost, a move to another NATS) start at the stream's first message; otherwise where configured (found by a disaster-recovery review: what ingest stored before delivery started was skipped)", async () => {
    const moved = await startNats();
    try {
      const destination = (name: string, deliveringSince: string) => ({
        namespace: "default", name, enabled: true, sources: ["web"], urls: ["https://hooks.example.com/in"], headers: [],
        timeoutMs: 5000, retryWindowMs: 60_000, maxInFlight: 10, standardWebhooks: false, deliveringSince,
      });
      const pending = async (name: string) => (await moved.jsm.consumers.info(EVENTS_STREAM, consumerName("default", name))).num_pending;
      await ensureStream(moved.jsm, eventsStreamConfig(settings));
      for (const id of ["stored-1", "stored-2"]) await moved.js.publish("trackhook.events.default.web.track", JSON.stringify({ messageId: id }), { msgID: id });
      const made: unknown[] = [];
      // Delivering for an hour, on a stream made just now: what it holds arrived for the destination.
      const warned: Array<[Record<string, unknown>, string]> = [];
      const log = { warn: (fields: object, msg: string) => void warned.push([fields as Record<string, unknown>, msg]), info: () => {} };
      await ensureDestinationConsumer(moved.jsm, destination("lost", new Date(Date.now() - 3_600_000).toISOString()), { onCreated: (m) => made.push(m), log });
      // Said by whichever process made it, with how many wait.
      expect(warned).toEqual([[expect.objectContaining({ destination: "default/lost", pending: 2 }), expect.stringContaining("the events stream is younger than the destination")]]);
      expect(made).toEqual([{ from: "stream-start", streamCreated: (await moved.jsm.streams.info(EVENTS_STREAM)).created, pending: 2 }]);
      expect(await pending("lost")).toBe(2);
      // Enabled again just now (deliveringSince after the stream was made): what was sent while it was off is not sent.
      await ensureDestinationConsumer(moved.jsm, destination("again", new Date(Date.now() + 1_000).toISOString()), { onCreated: (m) => made.push(m) });
      expect(made.at(-1)).toEqual({ from: "config" });
      expect(await pending("again")).toBe(0);
      // Not yet in effect (createdAt): from its creation, which covers a younger stream already, and not said as a store lost.
      await ensureDestinationConsumer(moved.jsm, { ...destination("fresh", new Date(Date.now() - 3_600_000).toISOString()), createdAt: new Date(Date.now() - 3_600_000).toISOString() }, { onCreated: (m) => made.push(m), log });
      expect(warned).toHaveLength(1); // not said as a store lost
      expect(made.at(-1)).toEqual({ from: "config" });
      expect(await pending("fresh")).toBe(2);
      // A delivery pod making it with the time it first wanted it: still from the stream's start.
      await ensureDestinationConsumer(moved.jsm, destination("pod", new Date(Date.now() - 3_600_000).toISOString()), { firstWanted: new Date().toISOString(), onCreated: (m) => made.push(m) });
      expect(made.at(-1)).toMatchObject({ from: "stream-start", pending: 2 });
      made.splice(2);
      // A consumer that exists keeps its place whatever deliveringSince says.
      await ensureDestinationConsumer(moved.jsm, destination("again", new Date(0).toISOString()), { onCreated: (m) => made.push(m) });
      expect(made).toHaveLength(2);
      expect(await pending("again")).toBe(0);
    } finally {
      await moved.stop();
    }
  });

  it("removing them succeeds when the events stream does not exist (regression: a WebhookDestination's finalizer hung)", async () => {
    const bare = await startNats();
    try {
      await expect(removeDestinationConsumers(bare.jsm, [consumerName("default", "hook")])).resolves.toBe(0);
    } finally {
      await bare.stop();
    }
  });
});

describe("dead-letter stream", () => {
  const side = { maxBytes: 64 * 1024 ** 2, replicas: 1 };
  const dlq = async () => (await nats.jsm.streams.info(DLQ_STREAM)).config;

  it("takes a per-destination limit, keeps it when a process is started without the flag, and drops it when asked to, saying nothing when nothing changes", async () => {
    const told: StreamSettingChange[][] = [];
    const ensure = (settings: Parameters<typeof dlqStreamConfig>[0]) => ensureStream(nats.jsm, dlqStreamConfig(settings), (c) => told.push(c), keptSettings(settings?.defaulted));
    await ensure({ ...side, maxPerDestination: 0 });
    expect(await dlq()).toMatchObject({ max_msgs_per_subject: -1 });
    expect((await dlq()).discard_new_per_subject ?? false).toBe(false);
    await ensure({ ...side, maxPerDestination: 0 }); // nats-server leaves the false flag out: no change seen
    expect(told).toEqual([]);
    await ensure({ ...side, maxPerDestination: 1000 });
    expect(await dlq()).toMatchObject({ max_msgs_per_subject: 1000, discard_new_per_subject: true });
    // A pod of an older manifest, without the flag: the limit stays.
    await ensure({ ...side, maxPerDestination: 0, defaulted: ["maxPerDestination"] });
    expect(await dlq()).toMatchObject({ max_msgs_per_subject: 1000, discard_new_per_subject: true });
    await ensure({ ...side, maxPerDestination: 0 });
    expect(await dlq()).toMatchObject({ max_msgs_per_subject: -1 });
    expect((await dlq()).discard_new_per_subject ?? false).toBe(false);
    expect(told.map((changes) => changes.map((c) => c.setting))).toEqual([["max_msgs_per_subject", "discard_new_per_subject"], ["max_msgs_per_subject", "discard_new_per_subject"]]);
  });
});

describe("StreamGuard", () => {
  it("makes a lost stream again with the settings it was last seen with, not the ones it was given at start (found by a review: a pod without --stream-max-bytes made a tuned stream again with the default)", async () => {
    const name = `GUARDED_${Math.random().toString(36).slice(2, 8).toUpperCase()}`;
    const subjects = [`guarded.${name}.>`];
    await nats.jsm.streams.add({ name, subjects, max_bytes: 1024 * 1024 });
    const log = createLogger({ level: "silent" });
    const guard = new StreamGuard(nats.nc, nats.jsm, [{ name, subjects, max_bytes: 10 * 1024 * 1024 }], log, { everyMs: 100 });
    try {
      // An operator tunes it by hand; the guard sees it so, then it is lost.
      const { config } = await nats.jsm.streams.info(name);
      await nats.jsm.streams.update(name, { ...config, max_bytes: 2 * 1024 * 1024, max_msgs: 500 });
      await guard.check();
      await nats.jsm.streams.delete(name);
      await guard.check();
      expect((await nats.jsm.streams.info(name)).config).toMatchObject({ max_bytes: 2 * 1024 * 1024, max_msgs: 500 });
    } finally {
      guard.stop();
      await nats.jsm.streams.delete(name).catch(() => {});
    }
  });

  it("tells when a stream's content went back, as a restore from a backup does (found by a disaster-recovery review: the operator left a restored config bucket stale for ten minutes)", async () => {
    const own = await startNats();
    const name = "RESTORED";
    await own.jsm.streams.add({ name, subjects: ["restored.>"] });
    let told = 0;
    const guard = new StreamGuard(own.nc, own.jsm, [{ name, make: async () => {}, said: "made", rolledBack: { run: () => told++, said: "went back" } }], createLogger({ level: "silent" }), { everyMs: 60_000 });
    try {
      await own.js.publish("restored.a", "1");
      await guard.check();
      const backup = await coldBackup(own);
      const streamBack = () => expect.poll(() => own.jsm.streams.info(name).then(() => true, () => false), { timeout: 15_000, interval: 200 }).toBe(true);
      await streamBack();
      for (const n of ["2", "3"]) await own.js.publish("restored.a", n);
      await guard.check();
      expect(told).toBe(0); // it grew
      await backup.restore();
      await streamBack();
      await guard.check();
      expect(told).toBe(1);
      await guard.check();
      expect(told).toBe(1); // once per going back

      // Gone back and written up to and past where it ended before the guard looks (found by a
      // diff review: only a stream ending lower was noticed).
      const second = await coldBackup(own);
      await streamBack();
      await own.js.publish("restored.a", "2");
      await guard.check();
      await second.restore();
      await streamBack();
      for (const n of ["2b", "3b"]) await own.js.publish("restored.a", n);
      await guard.check();
      expect(told).toBe(2);
    } finally {
      guard.stop();
      await own.stop();
    }
  });
});
