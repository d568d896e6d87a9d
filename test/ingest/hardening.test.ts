// Regression tests for inputs found to break the ingest in review: each once crashed it, stored
// something it should not have, or answered 503/500 forever to a request that can never succeed.
import { request } from "node:http";
import { describe, expect, it } from "vitest";
import { OTHER_WRITE_KEY, WRITE_KEY, basic, messagesCounted, post, postChunked, storedMessages, uniqueId, useIngest } from "../harness/ingest.ts";

const env = useIngest();

const auth = { authorization: basic(WRITE_KEY) };
const stored = async (id: string) => (await storedMessages(env.nats)).filter((m) => m.body.messageId === id);

/** A body sent in 8KB chunks without Content-Length. */
const sendChunked = (path: string, body: string) =>
  postChunked(`${env.ingest.url}${path}`, Array.from({ length: Math.ceil(body.length / 8192) }, (_, i) => body.slice(i * 8192, (i + 1) * 8192)), auth);

describe("limits on streamed (chunked) bodies answer 400, not a reset connection", () => {
  it("a 40KB chunked single message", async () => {
    const res = await sendChunked("/v1/track", JSON.stringify({ userId: "u", event: "e", properties: { pad: "x".repeat(40 * 1024) } }));
    expect(res).toMatchObject({ status: 400, json: { code: "request_too_large" } });
  });

  it("a 600KB chunked batch", async () => {
    const batch = Array.from({ length: 30 }, () => ({ type: "track", userId: "u", event: "e", properties: { pad: "x".repeat(20 * 1024) } }));
    const res = await sendChunked("/v1/batch", JSON.stringify({ batch }));
    expect(res).toMatchObject({ status: 400, json: { code: "batch_too_large" } });
  });
});

describe("batch-level fields", () => {
  it("null batch-level context, integrations and sentAt count as absent, as in items", async () => {
    const id = uniqueId("null-envelope");
    const res = await post(`${env.ingest.url}/v1/batch`, { context: null, integrations: null, sentAt: null, batch: [{ type: "track", userId: "u", event: "e", messageId: id }] }, { headers: auth });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await stored(id)).toHaveLength(1);
  });

  it("date fields that are not date strings are ignored, and the message is still stored", async () => {
    const id = uniqueId("epoch");
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e", messageId: id, timestamp: 1_700_000_000_000, sentAt: { at: 1 }, originalTimestamp: true }, { headers: auth });
    expect(res.status).toBe(200);
    const [m] = await stored(id);
    expect(m!.body.timestamp).toBe(m!.body.receivedAt);
    expect(m!.body.originalTimestamp).toBe(m!.body.receivedAt);
    expect(m!.body).not.toHaveProperty("sentAt");
  });

  it("a batch context that would make merged items larger than 32KB is refused, nothing stored", async () => {
    const ids = Array.from({ length: 20 }, () => uniqueId("ctx"));
    const res = await post(`${env.ingest.url}/v1/batch`, {
      context: { pad: "x".repeat(400 * 1024) },
      batch: ids.map((messageId) => ({ type: "track", userId: "u", event: "e", messageId })),
    }, { headers: auth });
    expect(res).toMatchObject({ status: 400, json: { code: "batch_item_too_large" } });
    expect(res.json.message).toContain("after merging the batch context");
    for (const id of ids) expect(await stored(id)).toHaveLength(0);
  });

  it("many items with a moderate batch context are bounded in total", async () => {
    const res = await post(`${env.ingest.url}/v1/batch`, {
      context: { pad: "x".repeat(20 * 1024) },
      batch: Array.from({ length: 200 }, () => ({ type: "track", userId: "u", event: "e" })),
    }, { headers: auth });
    expect(res).toMatchObject({ status: 400, json: { code: "batch_too_large" } });
  });

  it("a large batch context stops the merging as soon as the total is over (regression: 136KB in, ~80MB merged and serialised before the 400)", async () => {
    const res = await post(`${env.ingest.url}/v1/batch`, {
      context: { pad: "x".repeat(31_000) },
      batch: Array.from({ length: 2_500 }, () => ({ type: "track", userId: "u", event: "e" })),
    }, { headers: auth });
    expect(res).toMatchObject({ status: 400, json: { code: "batch_too_large" } });
    // The limit is the batch body's 516KB, 1KB of enrichment per item and 2MB of the batch
    // context's copies: ~5MB, about 161 merged items.
    const at = Number(/after merging the batch context \(at item (\d+)\)/.exec(String(res.json.message))?.[1]);
    expect(at).toBeGreaterThan(150);
    expect(at).toBeLessThan(175);
  });

  it("a batch within the limits as sent is stored whole with its batch context merged in (found by an SDK review: analytics-go's 1KB DefaultContext got a full batch refused with 400, and dropped)", async () => {
    // As analytics-go sends it: 250 messages of ~1.9KB, a ~490KB body, the context at batch level.
    const context = { app: { name: "shop", version: "1" }, library: { name: "analytics-go", version: "3.0.0" }, deploy: "d".repeat(1_200) };
    const full = Array.from({ length: 250 }, () => ({ type: "track", userId: "u", event: "e", messageId: uniqueId("go-full"), properties: { pad: "p".repeat(1_850) } }));
    const res = await post(`${env.ingest.url}/v1/batch`, { context, batch: full }, { headers: auth });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    const [first] = await stored(full[0]!.messageId);
    expect(first!.body.context).toMatchObject({ deploy: context.deploy });
    expect(await stored(full[249]!.messageId)).toHaveLength(1);
    // And one message at the 32KB limit beside a 2KB batch context.
    const big = { type: "track", userId: "u", event: "e", messageId: uniqueId("go-big"), properties: { pad: "p".repeat(31_850) } };
    const res2 = await post(`${env.ingest.url}/v1/batch`, { context: { ...context, deploy: "d".repeat(2_000) }, batch: [big] }, { headers: auth });
    expect(res2).toMatchObject({ status: 200, json: { success: true } });
    expect(await stored(big.messageId)).toHaveLength(1);
  });

  it("a batch envelope with invalid integrations: 200, and its items not accepted as invalid_field, as an item's own would be (found by a spec audit: 400 made SDKs drop the batch)", async () => {
    const id = uniqueId("bad-envelope");
    const before = await messagesCounted(env.ingest, { reason: "invalid_field" });
    const res = await post(`${env.ingest.url}/v1/batch`, { integrations: { All: "nope" }, batch: [{ type: "track", userId: "u", event: "e", messageId: id }, { type: "identify", userId: "u" }] }, { headers: auth });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await messagesCounted(env.ingest, { reason: "invalid_field" })).toBe(before + 2);
    expect(await stored(id)).toEqual([]);
  });

  it("a batch-level writeKey that is not text does not matter once the request is authenticated (it is never stored)", async () => {
    const id = uniqueId("numeric-key");
    const res = await post(`${env.ingest.url}/v1/batch`, { writeKey: 5, batch: [{ type: "track", userId: "u", event: "e", messageId: id }] }, { headers: auth });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await stored(id)).toHaveLength(1);
  });
});

describe("inputs that used to give 503/500 forever", () => {
  it("a messageId with CR/LF is not accepted (it would be an invalid header), and the batch's good items are stored", async () => {
    const good = uniqueId("good");
    const res = await post(`${env.ingest.url}/v1/batch`, {
      batch: [{ type: "track", userId: "u", event: "e", messageId: "a\r\nb" }, { type: "track", userId: "u", event: "e", messageId: good }],
    }, { headers: auth });
    expect(res.status).toBe(200);
    expect(await stored(good)).toHaveLength(1);
  });

  it("a message nested deeper than 64 levels is answered 200 and not accepted (nested_too_deep)", async () => {
    const id = uniqueId("deep");
    const before = await messagesCounted(env.ingest, { reason: "nested_too_deep" });
    const deep = `{"userId":"u","event":"e","messageId":"${id}","properties":${'{"a":'.repeat(5_000)}1${"}".repeat(5_000)}}`;
    const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: auth, raw: deep });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await stored(id)).toHaveLength(0);
    expect(await messagesCounted(env.ingest, { reason: "nested_too_deep" })).toBe(before + 1);
  });

  it("in a batch, only the item nested too deep is not accepted; the others are stored", async () => {
    const [good, deep] = [uniqueId("good"), uniqueId("deep")];
    const nested = `${'{"a":'.repeat(70)}1${"}".repeat(70)}`;
    // Over 32KB in all, so every item's own size is measured too: the deep one must not break that.
    const padded = (id: string) => `{"type":"track","userId":"u","event":"e","messageId":"${id}","properties":{"pad":"${"x".repeat(20_000)}"}}`;
    const raw = `{"batch":[{"type":"track","userId":"u","event":"e","messageId":"${deep}","properties":${nested}},${padded(good)},${padded(`${good}-2`)}]}`;
    const res = await post(`${env.ingest.url}/v1/batch`, undefined, { headers: auth, raw });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await stored(good)).toHaveLength(1);
    expect(await stored(`${good}-2`)).toHaveLength(1);
    expect(await stored(deep)).toHaveLength(0);
  });

  it("a batch item whose type is nested deep is not accepted; the batch's other items are stored (regression: a 500 for the whole batch)", async () => {
    const good = uniqueId("good");
    const raw = `{"batch":[{"type":${"[".repeat(6_000)}${"]".repeat(6_000)},"userId":"u"},{"type":"track","userId":"u","event":"e","messageId":"${good}"}]}`;
    const res = await post(`${env.ingest.url}/v1/batch`, undefined, { headers: auth, raw });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await stored(good)).toHaveLength(1);
  });

  it("an unknown type is described, not echoed whole", async () => {
    const before = await messagesCounted(env.ingest, { reason: "unknown_type" });
    const res = await post(`${env.ingest.url}/v1/batch`, { batch: [{ type: { nested: ["x".repeat(10_000)] }, userId: "u" }, { type: "x".repeat(10_000), userId: "u" }] }, { headers: auth });
    expect(res.status).toBe(200);
    expect(await messagesCounted(env.ingest, { reason: "unknown_type" })).toBe(before + 2);
  });

  it("a message exactly 64 levels deep is stored", async () => {
    const id = uniqueId("deep64");
    // The message is level 1 and properties level 2: 62 more levels inside make 64.
    const raw = `{"userId":"u","event":"e","messageId":"${id}","properties":${"{\"a\":".repeat(62)}1${"}".repeat(62)}}`;
    expect((await post(`${env.ingest.url}/v1/track`, undefined, { headers: auth, raw })).status).toBe(200);
    expect(await stored(id)).toHaveLength(1);
  });

  it("brackets inside strings do not count as nesting", async () => {
    const id = uniqueId();
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "[".repeat(500), messageId: id, properties: { s: '{"\\"[[[' } }, { headers: auth });
    expect(res.status).toBe(200);
    expect(await stored(id)).toHaveLength(1);
  });

  it("a timestamp skew that leaves the range of a Date falls back to receivedAt", async () => {
    const id = uniqueId();
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e", messageId: id, timestamp: "+275760-09-13T00:00:00Z", sentAt: "2000-01-01T00:00:00Z" }, { headers: auth });
    expect(res.status).toBe(200);
    const [m] = await stored(id);
    expect(m!.body.timestamp).toBe(m!.body.receivedAt);
  });
});

describe("numbers a double cannot hold where an object belongs", () => {
  it("are not accepted as the object (invalid_field), and the batch's other items are stored (regression: context made the whole batch a 500)", async () => {
    const good = uniqueId();
    const items = [
      `{"type":"track","userId":"u","event":"Good","messageId":"${good}"}`,
      `{"type":"track","userId":"u","event":"Bad context","messageId":"${uniqueId()}","context":12345678901234567890}`,
      `{"type":"track","userId":"u","event":"Bad properties","messageId":"${uniqueId()}","properties":1e400}`,
      `{"type":"identify","userId":"u","messageId":"${uniqueId()}","integrations":{"All":1e400}}`,
    ];
    const before = await messagesCounted(env.ingest, { reason: "invalid_field" });
    const res = await post(`${env.ingest.url}/v1/batch`, undefined, { headers: auth, raw: `{"batch":[${items.join(",")}]}` });
    expect(res.status).toBe(200);
    expect(await messagesCounted(env.ingest, { reason: "invalid_field" })).toBe(before + 3);
    expect(await stored(good)).toHaveLength(1);
  });

  it("a batch-level context that is such a number makes its items not accepted, like any context that is not an object", async () => {
    const id = uniqueId("huge-context");
    const res = await post(`${env.ingest.url}/v1/batch`, undefined, { headers: auth, raw: `{"context":1e400,"batch":[{"type":"track","userId":"u","event":"E","messageId":"${id}"}]}` });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await stored(id)).toEqual([]);
  });
});

describe("prototype keys", () => {
  it("a __proto__ key cannot supply userId, type or event", async () => {
    const id = uniqueId("proto");
    const single = await post(`${env.ingest.url}/v1/track`, undefined, { headers: auth, raw: `{"__proto__":{"userId":"ghost"},"event":"no-ids","messageId":"${id}"}` });
    const batch = await post(`${env.ingest.url}/v1/batch`, undefined, { headers: auth, raw: `{"batch":[{"__proto__":{"type":"track","userId":"x","event":"y"},"messageId":"${id}-b"}]}` });
    expect([single.status, batch.status]).toEqual([200, 200]);
    expect(await stored(id)).toHaveLength(0);
    expect(await stored(`${id}-b`)).toHaveLength(0);
  });
});

describe("deduplication is per source", () => {
  it("the same messageId from two sources is stored twice, once per source", async () => {
    const id = uniqueId("shared");
    await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e", messageId: id }, { headers: auth });
    await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e", messageId: id }, { headers: { authorization: basic(OTHER_WRITE_KEY) } });
    const copies = await stored(id);
    expect(copies.map((c) => c.msgId).sort()).toEqual([`default/app/${id}`, `default/web/${id}`]);
  });
});

describe("client IP", () => {
  it("X-Forwarded-For is ignored when no proxy is trusted (no spoofing)", async () => {
    const id = uniqueId();
    await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e", messageId: id, context: { direct: true } }, { headers: { ...auth, "x-forwarded-for": "203.0.113.9" } });
    const [m] = await stored(id);
    expect(m!.body.context.ip).toBe("127.0.0.1");
  });
});

describe("a client that disconnects mid-body", () => {
  it("is counted as client_aborted, not as a server error", async () => {
    await new Promise<void>((resolve) => {
      const url = new URL(`${env.ingest.url}/v1/batch`);
      const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: "POST", headers: { ...auth, "content-length": "100000" } });
      req.on("error", () => resolve());
      req.write('{"batch":[');
      setTimeout(() => req.destroy(), 100);
      setTimeout(resolve, 400);
    });
    await new Promise((r) => setTimeout(r, 200));
    const metric = await env.ingest.metrics.requests.get();
    expect(metric.values.some((v) => v.labels.code === "client_aborted")).toBe(true);
    expect(metric.values.some((v) => v.labels.status === "500")).toBe(false);
  });
});

describe("what a client sent is stored as sent (found by a fuzz review)", () => {
  it("one source's backslash key does not rename another source's escaped key (regression: V8's JSON.parse, nodejs/node#63785, stored `\\u00e9` as `\\\\`)", async () => {
    const [poison, victim] = [uniqueId("poison"), uniqueId("victim")];
    const poisonBody = String.raw`{"userId":"a","event":"e","messageId":"${poison}","properties":{"tier":1,"\\":1}}`;
    const victimBody = String.raw`{"userId":"b","event":"e","messageId":"${victim}","properties":{"tier":2,"\u00e9":2}}`;
    expect((await post(`${env.ingest.url}/v1/track`, undefined, { raw: poisonBody, headers: { authorization: basic(OTHER_WRITE_KEY) } })).status).toBe(200);
    expect((await post(`${env.ingest.url}/v1/track`, undefined, { raw: victimBody, headers: auth })).status).toBe(200);
    const [message] = await stored(victim);
    expect((message!.body as { properties?: unknown }).properties).toEqual({ tier: 2, é: 2 });
    const [first] = await stored(poison);
    expect((first!.body as { properties?: unknown }).properties).toEqual({ tier: 1, "\\": 1 });
  });
});

describe("numbers a double cannot hold, in a message's own fields (found by a fuzz review)", () => {
  it("are kept as written in top-level fields of the client's own, and in fields another type defines (regression: rounded, or null)", async () => {
    const id = uniqueId("digits");
    const body = `{"userId":"u","event":"e","messageId":"${id}","orderId":12345678901234567890,"big":1e400,"tiny":1e-400,"traits":{"n":9007199254740993},"name":9007199254740993}`;
    expect((await post(`${env.ingest.url}/v1/track`, undefined, { raw: body, headers: auth })).status).toBe(200);
    const raw = await env.nats.jsm.streams.getMessage("TRACKHOOK_EVENTS", { last_by_subj: "trackhook.events.default.web.track" });
    const text = raw!.string();
    expect(text).toContain(`"messageId":"${id}"`);
    for (const kept of ['"orderId":12345678901234567890', '"big":1e400', '"tiny":1e-400', '"traits":{"n":9007199254740993}', '"name":9007199254740993']) expect(text).toContain(kept);
  });

  it("in a field the message's schema types, are still judged as numbers", async () => {
    const id = uniqueId("typed");
    const body = `{"userId":"u","event":12345678901234567890,"messageId":"${id}"}`;
    expect((await post(`${env.ingest.url}/v1/track`, undefined, { raw: body, headers: auth })).status).toBe(200);
    expect(await stored(id)).toEqual([]);
  });
});

describe("messageIds that differ only where a NATS header cannot tell (found by a fuzz review)", () => {
  it("are different messages: trailing spaces, U+FFFD and % all stored; a real repeat is still dropped (regression: counted duplicate_message_id, not stored)", async () => {
    const base = uniqueId("msgid");
    const ids = [base, `${base} `, `${base}\u00a0`, `${base}\ufffd`, `${base}%0020`, `${base} x`];
    for (const messageId of [...ids, `${base}\ud800`, `${base}\udfff`]) {
      expect((await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e", messageId }, { headers: auth })).status).toBe(200);
    }
    // Lone surrogates are not accepted (invalid_field): no header can carry them, and delivery could not send them (fidelity review).
    expect((await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e", messageId: `${base} ` }, { headers: auth })).status).toBe(200);
    const got = (await storedMessages(env.nats)).filter((m) => m.body.messageId.startsWith(base));
    expect(got.map((m) => m.body.messageId).sort()).toEqual([...ids].sort());
  });
});
