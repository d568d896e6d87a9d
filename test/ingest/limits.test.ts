// Size and count limits, each on its own, and the encodings they apply through: limits count
// decompressed bytes and are enforced while reading, so a gzip bomb is never inflated.
import { createGzip, deflateSync, gzipSync } from "node:zlib";
import { beforeAll, describe, expect, it } from "vitest";
import { WRITE_KEY, basic, post, postChunked, storedMessages, uniqueId, useIngest } from "../harness/ingest.ts";

const env = useIngest();

const KB = 1024;
const auth = { authorization: basic(WRITE_KEY) };

/** A track message whose JSON is exactly `bytes` long. */
function trackOfSize(bytes: number, messageId = uniqueId()): { messageId: string; properties: { pad: string } } {
  const base = { userId: "u1", event: "Sized", messageId, properties: { pad: "" } };
  const pad = bytes - Buffer.byteLength(JSON.stringify(base));
  base.properties.pad = "x".repeat(pad);
  expect(Buffer.byteLength(JSON.stringify(base))).toBe(bytes);
  return base;
}

/** A batch body whose JSON is exactly `bytes` long, made of items of at most 30KB. */
function batchOfSize(bytes: number): { batch: Record<string, unknown>[] } {
  const body = { batch: [] as Record<string, unknown>[] };
  while (Buffer.byteLength(JSON.stringify(body)) + 31 * KB < bytes) body.batch.push({ type: "track", ...trackOfSize(30 * KB) });
  const last = { type: "track", ...trackOfSize(200) };
  body.batch.push(last);
  last.properties.pad += "x".repeat(bytes - Buffer.byteLength(JSON.stringify(body)));
  expect(Buffer.byteLength(JSON.stringify(body))).toBe(bytes);
  return body;
}

describe("single-message limit (32KB)", () => {
  it("accepts a message of exactly 32KB", async () => {
    const message = trackOfSize(32 * KB);
    const res = await post(`${env.ingest.url}/v1/track`, message, { headers: auth });
    expect(res.status).toBe(200);
    expect((await storedMessages(env.nats)).some((m) => m.body.messageId === message.messageId)).toBe(true);
  });

  it("refuses a message one byte over 32KB with 400 request_too_large", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, trackOfSize(32 * KB + 1), { headers: auth });
    expect(res).toMatchObject({ status: 400, json: { code: "request_too_large" } });
  });
});

describe("batch request limit (500KB of messages, the body up to 516KB)", () => {
  it("accepts a batch body of exactly 516KB: the spec's 500KB and 16KB for the batch's own fields", async () => {
    const res = await post(`${env.ingest.url}/v1/batch`, batchOfSize(516 * KB), { headers: auth });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
  });

  it("refuses a batch body one byte over 516KB with 400 batch_too_large", async () => {
    const res = await post(`${env.ingest.url}/v1/batch`, batchOfSize(516 * KB + 1), { headers: auth });
    expect(res).toMatchObject({ status: 400, json: { code: "batch_too_large", message: "Batch request body is over the 516KB limit" } });
  });

  // Found by an SDK audit: each filled its batch up to the limit by its own count, and dropped
  // the whole batch on the 400 it got.
  it.each([
    // lib/segment/analytics/message_batch.rb: items up to 512,000 bytes, then `{"sentAt":...,"batch":[...]}`.
    ["analytics-ruby", "/v1/import", 512_000, (batch: unknown[]) => ({ sentAt: new Date().toISOString(), batch })],
    // packages/core/src/util.ts chunk(): 500 KiB of items, then `{batch, sentAt, writeKey}`.
    ["analytics-react-native", "/v1/b", 512_000, (batch: unknown[]) => ({ batch, sentAt: new Date().toISOString(), writeKey: WRITE_KEY })],
    // src/batcher.rs: MAX_BATCH_SIZE = 1024 * 512 bytes of messages.
    ["analytics-rust", "/v1/batch", 512 * KB, (batch: unknown[]) => ({ batch, context: { library: { name: "analytics-rust", version: "2.0.0" } } })],
  ] as const)("stores a batch %s fills to its own limit (regression: 400, and the SDK dropped the batch)", async (_sdk, path, itemBytes, envelope) => {
    const sizes = [...Array.from({ length: 15 }, () => 32 * KB)];
    sizes.push(itemBytes - sizes.reduce((a, b) => a + b, 0));
    const batch = sizes.map((size) => ({ type: "track", ...trackOfSize(size - 15) }));
    expect(batch.reduce((sum, item) => sum + Buffer.byteLength(JSON.stringify(item)), 0)).toBe(itemBytes);
    const body = envelope(batch);
    expect(Buffer.byteLength(JSON.stringify(body))).toBeGreaterThan(500 * KB);
    const res = await post(`${env.ingest.url}${path}`, body, { headers: auth });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    const ids = new Set(batch.map((m) => m.messageId));
    expect((await storedMessages(env.nats)).filter((m) => ids.has(m.body.messageId as string))).toHaveLength(batch.length);
  });
});

describe("batch item limit (32KB)", () => {
  it("accepts a batch item of exactly 32KB", async () => {
    const item = { type: "track", ...trackOfSize(32 * KB - 15) };
    expect(Buffer.byteLength(JSON.stringify(item))).toBe(32 * KB);
    const res = await post(`${env.ingest.url}/v1/batch`, { batch: [item] }, { headers: auth });
    expect(res.status).toBe(200);
  });

  it("refuses a batch item one byte over 32KB with 400 batch_item_too_large", async () => {
    const item = { type: "track", ...trackOfSize(32 * KB - 14) };
    const res = await post(`${env.ingest.url}/v1/batch`, { batch: [item] }, { headers: auth });
    expect(res).toMatchObject({ status: 400, json: { code: "batch_item_too_large" } });
  });
});

describe("batch item count limit (2,500)", () => {
  const items = (n: number) => Array.from({ length: n }, (_, i) => ({ type: "track", userId: "u", event: "e", messageId: uniqueId(`n${i}`) }));

  it("accepts and stores 2,500 items", async () => {
    const batch = items(2500);
    const res = await post(`${env.ingest.url}/v1/batch`, { batch }, { headers: auth });
    expect(res.status).toBe(200);
    const stored = new Set((await storedMessages(env.nats)).map((m) => m.body.messageId));
    expect(batch.every((item) => stored.has(item.messageId))).toBe(true);
  });

  it("refuses 2,501 items with 400 too_many_batch_items", async () => {
    const res = await post(`${env.ingest.url}/v1/batch`, { batch: items(2501) }, { headers: auth });
    expect(res).toMatchObject({ status: 400, json: { code: "too_many_batch_items" } });
  });
});

describe("content types and encodings", () => {
  it("accepts JSON sent as text/plain (analytics.js)", async () => {
    const id = uniqueId();
    const res = await post(`${env.ingest.url}/v1/t`, { userId: "u1", event: "Plain", messageId: id, writeKey: WRITE_KEY }, { headers: { "content-type": "text/plain" } });
    expect(res.status).toBe(200);
    expect((await storedMessages(env.nats)).some((m) => m.body.messageId === id)).toBe(true);
  });

  it("accepts a gzip body (analytics-python, analytics-android)", async () => {
    const id = uniqueId();
    const raw = gzipSync(JSON.stringify({ batch: [{ type: "track", userId: "u1", event: "Gz", messageId: id }] }));
    const res = await post(`${env.ingest.url}/v1/batch`, undefined, { headers: { ...auth, "content-encoding": "gzip" }, raw });
    expect(res.status).toBe(200);
    expect((await storedMessages(env.nats)).some((m) => m.body.messageId === id)).toBe(true);
  });

  it("accepts a deflate body", async () => {
    const id = uniqueId();
    const raw = deflateSync(JSON.stringify({ userId: "u1", event: "Deflated", messageId: id }));
    const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: { ...auth, "content-encoding": "deflate" }, raw });
    expect(res.status).toBe(200);
    expect((await storedMessages(env.nats)).find((m) => m.body.messageId === id)?.body).toMatchObject({ event: "Deflated", userId: "u1" });
  });

  it("applies the limit to decompressed bytes: 33KB that gzips to 100 bytes is refused", async () => {
    const raw = gzipSync(JSON.stringify(trackOfSize(33 * KB)));
    expect(raw.length).toBeLessThan(1024);
    const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: { ...auth, "content-encoding": "gzip" }, raw });
    expect(res).toMatchObject({ status: 400, json: { code: "request_too_large" } });
  });

  it("refuses a corrupt gzip body with 400 invalid_compression", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: { ...auth, "content-encoding": "gzip" }, raw: "definitely not gzip" });
    expect(res).toMatchObject({ status: 400, json: { code: "invalid_compression" } });
  });

  it("refuses an unknown Content-Encoding with 415 unsupported_content_encoding", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e" }, { headers: { ...auth, "content-encoding": "br" } });
    expect(res).toMatchObject({ status: 415, json: { code: "unsupported_content_encoding" } });
  });
});

describe("gzip bomb (1GB of zeros, ~1MB compressed)", () => {
  let bomb: Buffer;
  beforeAll(async () => {
    const gzip = createGzip({ level: 9 });
    const chunks: Buffer[] = [];
    gzip.on("data", (c: Buffer) => chunks.push(c));
    const zeros = Buffer.alloc(1024 * 1024);
    for (let i = 0; i < 1024; i++) if (!gzip.write(zeros)) await new Promise((r) => gzip.once("drain", r));
    await new Promise((r) => gzip.end(r));
    bomb = Buffer.concat(chunks);
  });

  /** Sends a body chunked (no Content-Length), so only the bounds applied while reading can stop it. */
  const sendChunked = (body: Buffer) =>
    postChunked(`${env.ingest.url}/v1/batch`, [body.subarray(0, 64 * KB), body.subarray(64 * KB)], { ...auth, "content-encoding": "gzip" });

  it("is refused with 400 batch_too_large after inflating no more than the limit", async () => {
    const rssBefore = process.memoryUsage().rss;
    const res = await sendChunked(bomb);
    expect(res).toMatchObject({ status: 400, json: { code: "batch_too_large" } });
    // Inflating 1GB would show as ~1GB of RSS; the bounded reader holds ~500KB.
    expect(process.memoryUsage().rss - rssBefore).toBeLessThan(100 * 1024 * 1024);
  });

  it("is refused up front when its Content-Length already exceeds what can fit", async () => {
    const res = await post(`${env.ingest.url}/v1/batch`, undefined, { headers: { ...auth, "content-encoding": "gzip" }, raw: bomb });
    expect(res).toMatchObject({ status: 400, json: { code: "batch_too_large" } });
  });

  it("bounds what a small body inflates to: 50MB of JSON whitespace in 50KB of gzip is refused, not read (found by a mutation audit: only the wire-bytes bound was ever tested)", async () => {
    const inflated = Buffer.concat([Buffer.from('{"batch":['), Buffer.alloc(50 * 1024 * 1024, " "), Buffer.from("]}")]);
    const small = gzipSync(inflated, { level: 9 });
    expect(small.length).toBeLessThan(100 * KB);
    const batch = await sendChunked(small);
    expect(batch).toMatchObject({ status: 400, json: { code: "batch_too_large" } });
    const single = Buffer.concat([Buffer.from('{"userId":"u1","event":"e"'), Buffer.alloc(1024 * 1024, " "), Buffer.from("}")]);
    const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: { ...auth, "content-encoding": "gzip" }, raw: gzipSync(single) });
    expect(res).toMatchObject({ status: 400, json: { code: "request_too_large" } });
  });

  it("bounds compressed bytes too: 600KB of empty gzip members (0 bytes inflated) is refused, not hung on", async () => {
    const empty = gzipSync(Buffer.alloc(0));
    const members = Buffer.concat(Array.from({ length: Math.ceil((600 * KB) / empty.length) }, () => empty));
    const res = await sendChunked(members);
    expect(res).toMatchObject({ status: 400, json: { code: "batch_too_large" } });
  });

  it("leaves the server answering normally afterwards", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u1", event: "After bomb" }, { headers: auth });
    expect(res.status).toBe(200);
  });
});
