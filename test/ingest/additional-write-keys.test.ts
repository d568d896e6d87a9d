// A Source's spec.additionalWriteKeySecretRefs: a key can be rotated while apps in the field still
// send the old one (mobile apps keep theirs for months; an SDK drops what gets 401). Every key is
// accepted for the same source, and requests with an additional key are counted per key, so a
// team can see when the old one has gone quiet.
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { ConfigError, ConfigHolder, compileConfig, sha256Hex } from "../../dataplane/config/mod.ts";
import { OTHER_WRITE_KEY, WRITE_KEY, basic, post, storedMessages, uniqueId, useIngest } from "../harness/ingest.ts";

const OLD_KEY = "old-web-key";

const compile = (yaml: string) => compileConfig(parseAllDocuments(yaml).map((doc, i) => ({ origin: `document ${i + 1}`, body: doc.toJS() })));

/** `web`: WRITE_KEY, and OLD_KEY when `additional` says so; `app`: OTHER_WRITE_KEY. */
function config(additional = "[{ name: old-keys, key: web }]", extraSecret = "") {
  return compile(`
apiVersion: v1
kind: Secret
metadata: { name: keys }
stringData: { web: ${WRITE_KEY}, app: ${OTHER_WRITE_KEY} }
---
apiVersion: v1
kind: Secret
metadata: { name: old-keys }
stringData: { web: ${OLD_KEY}${extraSecret} }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: web }
spec: { writeKeySecretRef: { name: keys, key: web }, additionalWriteKeySecretRefs: ${additional} }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: app }
spec: { writeKeySecretRef: { name: keys, key: app } }
`);
}

describe("additional write keys in --config files", () => {
  it("compiles each key to a digest with the Secret it came from, never the key itself", () => {
    const web = config().sources.find((s) => s.name === "web")!;
    expect(web.writeKeySha256).toBe(sha256Hex(WRITE_KEY));
    expect(web.additionalWriteKeys).toEqual([{ sha256: sha256Hex(OLD_KEY), secretKey: "old-keys/web" }]);
    expect(JSON.stringify(web)).not.toContain(OLD_KEY);
  });

  it("accepts the main key listed again, or one key twice, once", () => {
    const web = config("[{ name: keys, key: web }, { name: old-keys, key: web }, { name: old-keys, key: again }]", `, again: ${OLD_KEY}`).sources.find((s) => s.name === "web")!;
    expect(web.additionalWriteKeys).toEqual([{ sha256: sha256Hex(OLD_KEY), secretKey: "old-keys/web" }]);
  });

  it("refuses a file whose additional key cannot be read, naming the field", () => {
    expect(() => config("[{ name: old-keys, key: missing }]")).toThrow(ConfigError);
    expect(() => config("[{ name: old-keys, key: missing }]")).toThrow(/Source web\): spec\.additionalWriteKeySecretRefs\[0\]: Secret default\/old-keys has no key "missing"/);
    expect(() => config("[{ name: nowhere, key: web }]")).toThrow(/spec\.additionalWriteKeySecretRefs\[0\]: Secret default\/nowhere does not exist/);
  });

  it("refuses a key another Source uses, as its main or an additional key", () => {
    expect(() => config("[{ name: keys, key: app }]")).toThrow(/Source app\): spec\.writeKeySecretRef: the same write key is already used by Source default\/web/);
  });

  it("refuses more than four additional keys", () => {
    const five = JSON.stringify(Array.from({ length: 5 }, (_, i) => ({ name: "old-keys", key: `k${i}` })));
    expect(() => config(five)).toThrow(/additionalWriteKeySecretRefs/);
  });
});

const holder = new ConfigHolder(config());
const env = useIngest({ config: holder });

const track = (messageId: string, extra: Record<string, unknown> = {}) => ({ userId: "u1", event: "Rotated", messageId, ...extra });

async function additionalKeyRequests(): Promise<Array<{ labels: Record<string, string | number | undefined>; value: number }>> {
  const registry = env.ingest.metrics.registry;
  const metric = await registry.getSingleMetric("trackhook_ingest_additional_key_requests_total")!.get();
  return metric.values.map((v) => ({ labels: { ...v.labels }, value: v.value }));
}

describe("additional write keys at the ingest", () => {
  it("stores messages sent with either key under the source, and counts those with the additional one", async () => {
    const [byMain, byOldHeader, byOldBody, byOldBatch] = [uniqueId("main"), uniqueId("old-h"), uniqueId("old-b"), uniqueId("old-batch")];
    expect((await post(`${env.ingest.url}/v1/track`, track(byMain), { headers: { authorization: basic(WRITE_KEY) } })).status).toBe(200);
    expect((await post(`${env.ingest.url}/v1/track`, track(byOldHeader), { headers: { authorization: basic(OLD_KEY) } })).status).toBe(200);
    // The second request with the same header is answered from the header cache: counted too.
    expect((await post(`${env.ingest.url}/v1/track`, track(uniqueId("old-h2")), { headers: { authorization: basic(OLD_KEY) } })).status).toBe(200);
    expect((await post(`${env.ingest.url}/v1/track`, track(byOldBody, { writeKey: OLD_KEY }))).status).toBe(200);
    expect((await post(`${env.ingest.url}/v1/batch`, { writeKey: OLD_KEY, batch: [{ type: "track", ...track(byOldBatch) }] })).status).toBe(200);

    const stored = new Map((await storedMessages(env.nats)).map((m) => [m.body.messageId, m.subject]));
    for (const id of [byMain, byOldHeader, byOldBody, byOldBatch]) expect(stored.get(id)).toBe("trackhook.events.default.web.track");
    expect(await additionalKeyRequests()).toEqual([{ labels: { source: "default/web", secret: "old-keys", key: "web" }, value: 4 }]);
  });

  it("serves analytics.js settings for an additional key", async () => {
    expect((await fetch(`${env.ingest.url}/v1/projects/${OLD_KEY}/settings`)).status).toBe(200);
  });

  it("refuses the old key with 401 once its reference is removed (regression guard: the header cache forgets it)", async () => {
    const headers = { authorization: basic(OLD_KEY) };
    expect((await post(`${env.ingest.url}/v1/track`, track(uniqueId("before")), { headers })).status).toBe(200);
    holder.set(config("[]"));
    try {
      expect(await post(`${env.ingest.url}/v1/track`, track(uniqueId("after")), { headers })).toMatchObject({ status: 401, json: { code: "invalid_write_key" } });
      expect((await post(`${env.ingest.url}/v1/track`, track(uniqueId("main-after")), { headers: { authorization: basic(WRITE_KEY) } })).status).toBe(200);
    } finally {
      holder.set(config());
    }
  });
});
