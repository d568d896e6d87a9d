// --config-from nats: the data plane follows the trackhook-config bucket the operator writes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigWriter, KvConfigProvider, destinationKey, ensureConfigBucket, parseConfigKey, sha256Hex, sourceKey } from "../../dataplane/config/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import type { CompiledConfig, CompiledDestination, CompiledSource } from "../../schema/mod.ts";
import { coldBackup, startNats, type NatsHarness } from "../harness/nats.ts";

const log = createLogger({ level: "silent" });
const source = (name: string, key = `${name}-key`): CompiledSource => ({ namespace: "shop", name, enabled: true, writeKeySha256: sha256Hex(key) });
const keyOf = (provider: KvConfigProvider, name: string) => provider.current().sources.find((s) => s.name === name)?.writeKeySha256;
const destination = (name: string, sources: string[]): CompiledDestination => ({
  namespace: "shop", name, enabled: true, sources, urls: ["https://hooks.example.com/in"], headers: [],
  timeoutMs: 5000, retryWindowMs: 14_400_000, maxInFlight: 100, standardWebhooks: false,
});

let nats: NatsHarness;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(() => nats.stop());

function nextConfig(provider: KvConfigProvider): Promise<CompiledConfig> {
  return new Promise((resolve) => {
    const off = provider.subscribe((config) => {
      off();
      resolve(config);
    });
  });
}

describe("config keys", () => {
  it("parse back into what sourceKey and destinationKey were given; other keys are not config", () => {
    expect(parseConfigKey(sourceKey("shop", "web"))).toEqual({ kind: "source", namespace: "shop", name: "web" });
    expect(parseConfigKey(destinationKey("shop", "hook"))).toEqual({ kind: "destination", namespace: "shop", name: "hook" });
    for (const key of ["secret.shop.keys", "source.shop", "source.shop.web.extra", "source..web"]) expect(parseConfigKey(key), key).toBeUndefined();
  });
});

describe("KvConfigProvider", () => {
  it("waits for the bucket, loads what is there, then follows puts and deletes", async () => {
    const starting = KvConfigProvider.start(await nats.connect(), log, { retryMs: 50 });
    await new Promise((r) => setTimeout(r, 200)); // no bucket yet: the provider keeps waiting
    const writer = new ConfigWriter(await ensureConfigBucket(nats.nc));
    await writer.put(sourceKey("shop", "web"), source("web"));
    await writer.put(sourceKey("shop", "app"), source("app"));
    const provider = await starting;
    try {
      expect(provider.ready).toBe(true);
      // The provider may find the bucket between the two puts; "app" then arrives as an update.
      await expect.poll(() => provider.current().sources.map((s) => s.name).sort()).toEqual(["app", "web"]);

      let next = nextConfig(provider);
      await writer.put(destinationKey("shop", "hook"), destination("hook", ["web"]));
      expect((await next).destinations).toEqual([destination("hook", ["web"])]);

      next = nextConfig(provider);
      await writer.put(sourceKey("shop", "web"), source("web", "rotated"));
      expect((await next).sources.find((s) => s.name === "web")?.writeKeySha256).toBe(sha256Hex("rotated"));

      next = nextConfig(provider);
      expect(await writer.delete(sourceKey("shop", "app"))).toBe(true);
      expect((await next).sources.map((s) => s.name)).toEqual(["web"]);
      expect(await writer.delete(sourceKey("shop", "app"))).toBe(false);
    } finally {
      provider.close();
    }
  });

  it("ignores an entry that does not validate and keeps the previous value", async () => {
    const kv = await ensureConfigBucket(nats.nc);
    const writer = new ConfigWriter(kv);
    await writer.put(sourceKey("shop", "good"), source("good"));
    const provider = await KvConfigProvider.start(await nats.connect(), log);
    try {
      const before = provider.current().sources.find((s) => s.name === "good");
      expect(before).toBeDefined();
      await kv.put(sourceKey("shop", "good"), JSON.stringify({ name: "good", writeKey: "plain-text" }));
      await kv.put(sourceKey("shop", "broken"), "not json");
      const next = nextConfig(provider);
      await writer.put(sourceKey("shop", "later"), source("later"));
      const config = await next;
      expect(config.sources.find((s) => s.name === "good")).toEqual(before);
      expect(config.sources.some((s) => s.name === "broken")).toBe(false);
    } finally {
      provider.close();
    }
  });

  it("takes an entry with fields it does not know, without them (regression: a newer operator's field refused the write key with 401 in a rolling upgrade)", async () => {
    const kv = await ensureConfigBucket(nats.nc);
    const lines: string[] = [];
    const provider = await KvConfigProvider.start(await nats.connect(), createLogger({ level: "warn", destination: { write: (l) => lines.push(l) } }));
    try {
      const next = nextConfig(provider);
      await kv.put(sourceKey("shop", "newer"), JSON.stringify({ ...source("newer"), allowedOrigins: ["https://shop.example"] }));
      const config = await next;
      expect(config.sources.find((s) => s.name === "newer")).toEqual(source("newer"));
      expect(lines.map((l) => JSON.parse(l) as Record<string, unknown>)).toContainEqual(
        expect.objectContaining({ key: sourceKey("shop", "newer"), fields: ["allowedOrigins"], msg: expect.stringContaining("does not know") }),
      );
    } finally {
      provider.close();
    }
  });

  it("writes only when the value changes", async () => {
    const writer = new ConfigWriter(await ensureConfigBucket(nats.nc));
    expect(await writer.put(sourceKey("shop", "same"), source("same"))).toBe(true);
    expect(await writer.put(sourceKey("shop", "same"), source("same"))).toBe(false);
    expect(await writer.get(sourceKey("shop", "same"))).toEqual(source("same"));
  });

  it("starts over when the bucket is deleted and created again (its revisions restart), keeping the old config in effect until the new bucket is refilled (found by a review: the empty bucket's config had ingest answer 401 to everyone)", async () => {
    await (await ensureConfigBucket(nats.nc)).destroy(); // a clean slate after the tests above
    const writer = new ConfigWriter(await ensureConfigBucket(nats.nc));
    for (const name of ["a", "b", "c", "d"]) await writer.put(sourceKey("shop", name), source(name));
    const provider = await KvConfigProvider.start(await nats.connect(), log, { retryMs: 50, refillMs: 1_000 });
    const seen: string[][] = [];
    const off = provider.subscribe((config) => seen.push(config.sources.map((s) => s.name).sort()));
    try {
      expect(provider.current().sources).toHaveLength(4);
      await writer.kv.destroy();
      const reborn = new ConfigWriter(await ensureConfigBucket(nats.nc));
      await new Promise((r) => setTimeout(r, 600)); // noticed (retryMs * 5), still empty
      expect(provider.current().sources.map((s) => s.name).sort()).toEqual(["a", "b", "c", "d"]);
      await reborn.put(sourceKey("shop", "a"), source("a"));
      await reborn.put(sourceKey("shop", "only"), source("only"));
      await expect.poll(() => provider.current().sources.map((s) => s.name).sort(), { timeout: 5_000 }).toEqual(["a", "only"]);
      // Never an empty config, and the lost bucket's entries went only once the new one was refilled.
      expect(seen.every((names) => names.length > 0)).toBe(true);
      expect(seen).toContainEqual(["a", "b", "c", "d", "only"]);
    } finally {
      off();
      provider.close();
    }
  });

  it("follows a bucket restored from a backup when the operator has written it up to the revision read before (found by a diff review: one key rotated since the backup, written again at the same revision, was never seen)", async () => {
    const own = await startNats();
    const writer = () => ensureConfigBucket(own.nc).then((kv) => new ConfigWriter(kv));
    const bucketBack = () => expect.poll(() => writer().then(() => true, () => false), { timeout: 15_000 }).toBe(true);
    await (await writer()).put(sourceKey("shop", "a"), source("a", "key-1")); // revision 1
    // Its own looks every 10 s: the operator's write below comes first.
    const provider = await KvConfigProvider.start(await own.connect(), log, { retryMs: 2_000, refillMs: 500 });
    try {
      const backup = await coldBackup(own);
      await bucketBack();
      await (await writer()).put(sourceKey("shop", "a"), source("a", "key-2")); // revision 2
      await expect.poll(() => keyOf(provider, "a"), { timeout: 10_000 }).toBe(sha256Hex("key-2"));
      await backup.restore(); // ends at revision 1
      await bucketBack();
      await (await writer()).put(sourceKey("shop", "a"), source("a", "key-3")); // revision 2 again
      await expect.poll(() => keyOf(provider, "a"), { timeout: 30_000 }).toBe(sha256Hex("key-3"));
    } finally {
      provider.close();
      await own.stop();
    }
  });

  it("follows a bucket restored from a backup, whose revisions went back (found by a disaster-recovery review: a key rotated after the restore was never taken)", async () => {
    const own = await startNats();
    const writer = () => ensureConfigBucket(own.nc).then((kv) => new ConfigWriter(kv));
    const bucketBack = () => expect.poll(() => writer().then(() => true, () => false), { timeout: 15_000 }).toBe(true);
    await (await writer()).put(sourceKey("shop", "a"), source("a", "key-1"));
    const provider = await KvConfigProvider.start(await own.connect(), log, { retryMs: 50, refillMs: 500 });
    try {
      const backup = await coldBackup(own);
      await bucketBack();
      for (const key of ["key-2", "key-3", "key-4"]) await (await writer()).put(sourceKey("shop", "a"), source("a", key)); // revisions 2 to 4
      await expect.poll(() => keyOf(provider, "a"), { timeout: 10_000 }).toBe(sha256Hex("key-4"));
      // Restored: the bucket ends at revision 1 again; the next write is revision 2.
      await backup.restore();
      await bucketBack();
      await (await writer()).put(sourceKey("shop", "a"), source("a", "key-5"));
      await expect.poll(() => keyOf(provider, "a"), { timeout: 15_000 }).toBe(sha256Hex("key-5"));
    } finally {
      provider.close();
      await own.stop();
    }
  });
});
