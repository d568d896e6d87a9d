// A Source's spec.rateLimit: beyond it, requests get 429 rate_limited with Retry-After, nothing of
// them is stored, other sources are untouched, and an SDK that honours Retry-After gets every
// message in. (A noisy-neighbour review found one source could fill the shared stream: then every
// source got 503 storage_full until its messages aged out.)
import { Analytics } from "@segment/analytics-node";
import { describe, expect, it } from "vitest";
import { compileConfig, ConfigHolder } from "../../dataplane/config/mod.ts";
import { SourceRateLimits } from "../../dataplane/ingest/rate-limit.ts";
import type { CompiledSource } from "../../schema/mod.ts";
import { parseAllDocuments } from "yaml";
import { OTHER_WRITE_KEY, WRITE_KEY, basic, messagesCounted, post, storedMessages, uniqueId, useIngest } from "../harness/ingest.ts";

/** `web` (WRITE_KEY) limited as given (not at all without), `app` (OTHER_WRITE_KEY) not limited. */
function config(rateLimit?: string) {
  const yaml = `
apiVersion: v1
kind: Secret
metadata: { name: keys }
stringData: { web: ${WRITE_KEY}, app: ${OTHER_WRITE_KEY} }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: web }
spec: { writeKeySecretRef: { name: keys, key: web }${rateLimit ? `, rateLimit: ${rateLimit}` : ""} }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: app }
spec: { writeKeySecretRef: { name: keys, key: app } }
`;
  return compileConfig(parseAllDocuments(yaml).map((doc, i) => ({ origin: `document ${i + 1}`, body: doc.toJS() })));
}

const holder = new ConfigHolder(config("{ messagesPerSecond: 1, burst: 5 }"));
const env = useIngest({ config: holder });

/** A fresh limit for `web`: taken off first, so that no debt of an earlier test is carried over. */
function limitWeb(rateLimit: string): void {
  holder.set(config());
  holder.set(config(rateLimit));
}

const track = (messageId = uniqueId("rl")) => ({ type: "track", userId: "u1", event: "Limited", messageId });

describe("SourceRateLimits (the bucket alone)", () => {
  const source = (perSecond: number, burst: number): CompiledSource => ({
    namespace: "default", name: "web", enabled: true, writeKeySha256: "0".repeat(64), rateLimit: { perSecond, burst },
  });
  /** A SourceRateLimits on a clock the test moves. */
  const limiter = () => {
    let now = 0;
    return { limits: new SourceRateLimits(() => now), time: { advance: (ms: number) => (now += ms) } };
  };

  it("lets a burst through, then refuses until a message's worth has come back", () => {
    const { limits, time } = limiter();
    const web = source(10, 3);
    expect([1, 2, 3].map(() => limits.take(web, "default/web", 1))).toEqual([undefined, undefined, undefined]);
    expect(limits.take(web, "default/web", 1)).toBe(1);
    time.advance(99);
    expect(limits.take(web, "default/web", 1)).toBe(1);
    time.advance(2);
    expect(limits.take(web, "default/web", 1)).toBeUndefined();
    // Refill stops at the burst.
    time.advance(60_000);
    expect([1, 2, 3, 4].map(() => limits.take(web, "default/web", 1))).toEqual([undefined, undefined, undefined, 1]);
  });

  it("lets a batch larger than the burst through once, then makes the source wait out the debt", () => {
    const { limits, time } = limiter();
    const web = source(100, 100);
    expect(limits.take(web, "default/web", 2500)).toBeUndefined();
    // 2,400 messages owed at 100 a second: a token again after 24.01 s.
    expect(limits.take(web, "default/web", 1)).toBe(25);
    time.advance(24_000);
    expect(limits.take(web, "default/web", 1)).toBe(1);
    time.advance(20);
    expect(limits.take(web, "default/web", 1)).toBeUndefined();
  });

  it("does not count refused requests; a changed limit keeps what the source owes, paid at the new rate", () => {
    const { limits, time } = limiter();
    expect(limits.take(source(1, 2), "default/web", 2)).toBeUndefined();
    for (let i = 0; i < 5; i++) expect(limits.take(source(1, 2), "default/web", 100)).toBe(1);
    time.advance(1000);
    expect(limits.take(source(1, 2), "default/web", 1)).toBeUndefined();
    expect(limits.take(source(1, 2), "default/web", 1)).toBe(1);
    // Raised: no fresh burst, but the next message's worth comes at the new rate.
    expect(limits.take(source(5, 5), "default/web", 1)).toBe(1);
    time.advance(200);
    expect(limits.take(source(5, 5), "default/web", 1)).toBeUndefined();
    // Lowered in the middle of a flood (found by the diff review: a change refilled the bucket,
    // and the flood went through once more): the debt stays.
    expect(limits.take(source(100, 100), "other/flood", 1000)).toBeUndefined();
    expect(limits.take(source(10, 50), "other/flood", 1)).toBe(91);
  });

  it("switches a changed limit when the config changes, not at the source's next request", () => {
    const { limits, time } = limiter();
    expect(limits.take(source(1, 1), "default/web", 3)).toBeUndefined();
    limits.configure([source(1000, 1000)]);
    // Two owed: 3 ms at the new rate (counted at the old one until the next request, 3 s).
    time.advance(10);
    expect(limits.take(source(1000, 1000), "default/web", 1)).toBeUndefined();
  });

  it("gives back what was counted of messages that were not stored, up to the burst", () => {
    const { limits } = limiter();
    const web = source(1, 3);
    expect(limits.take(web, "default/web", 3)).toBeUndefined();
    expect(limits.take(web, "default/web", 1)).toBe(1);
    limits.giveBack("default/web", 2);
    expect(limits.take(web, "default/web", 1)).toBeUndefined();
    limits.giveBack("default/web", 100);
    expect([1, 2, 3, 4].map(() => limits.take(web, "default/web", 1))).toEqual([undefined, undefined, undefined, 1]);
  });

  it("lets unlimited sources through and forgets the buckets of sources no longer limited", () => {
    const { limits } = limiter();
    const open: CompiledSource = { namespace: "default", name: "app", enabled: true, writeKeySha256: "1".repeat(64) };
    for (let i = 0; i < 1000; i++) expect(limits.take(open, "default/app", 2500)).toBeUndefined();
    const web = source(1, 1);
    expect(limits.take(web, "default/web", 1)).toBeUndefined();
    expect(limits.take(web, "default/web", 1)).toBe(1);
    limits.configure([web]);
    expect(limits.take(web, "default/web", 1)).toBe(1);
    limits.configure([{ ...web, rateLimit: undefined }]);
    // Forgotten: limited again later, it starts full.
    expect(limits.take(web, "default/web", 1)).toBeUndefined();
  });
});

describe("a Source's rateLimit", () => {
  it("answers 429 rate_limited with Retry-After once the source is over it, stores nothing of that request, and leaves other sources alone", async () => {
    limitWeb("{ messagesPerSecond: 1, burst: 5 }");
    const before = await messagesCounted(env.ingest, { source: "default/web", outcome: "failed", reason: "rate_limited" });
    const auth = { authorization: basic(WRITE_KEY) };
    // Ten messages against a burst of five: through once, and the source owes five seconds.
    const batchIds = Array.from({ length: 10 }, () => uniqueId("rl-batch"));
    const first = await post(`${env.ingest.url}/v1/batch`, { batch: batchIds.map((id) => track(id)) }, { headers: auth });
    expect(first.status).toBe(200);

    const refusedId = uniqueId("rl-refused");
    const refused = await post(`${env.ingest.url}/v1/track`, track(refusedId), { headers: auth });
    expect(refused.status).toBe(429);
    expect(refused.json).toMatchObject({ success: false, code: "rate_limited" });
    expect(String(refused.json.message)).toContain("1 messages a second");
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(4);
    expect(retryAfter).toBeLessThanOrEqual(6);

    // A batch is refused whole, and the body's writeKey is the same source as the header.
    const refusedBatch = await post(`${env.ingest.url}/v1/batch`, { writeKey: WRITE_KEY, batch: [track(), track()] }, { headers: { origin: "https://shop.example" } });
    expect(refusedBatch.status).toBe(429);
    // A browser's script may read the Retry-After (analytics-next waits for it).
    expect(refusedBatch.headers.get("access-control-expose-headers")).toContain("Retry-After");
    expect(refusedBatch.headers.get("retry-after")).toBeTruthy();

    const otherId = uniqueId("rl-other");
    const other = await post(`${env.ingest.url}/v1/track`, track(otherId), { headers: { authorization: basic(OTHER_WRITE_KEY) } });
    expect(other.status).toBe(200);

    const stored = new Set((await storedMessages(env.nats)).map((m) => m.body.messageId));
    expect(batchIds.every((id) => stored.has(id))).toBe(true);
    expect(stored.has(otherId)).toBe(true);
    expect(stored.has(refusedId)).toBe(false);
    expect(await messagesCounted(env.ingest, { source: "default/web", outcome: "failed", reason: "rate_limited" })).toBe(before + 3);
    const requests = await env.ingest.metrics.requests.get();
    expect(requests.values.some((v) => String(v.labels.status) === "429" && v.labels.code === "rate_limited")).toBe(true);
  });

  it("takes a raised limit at once, without a restart", async () => {
    limitWeb("{ messagesPerSecond: 1, burst: 1 }");
    const auth = { authorization: basic(WRITE_KEY) };
    expect((await post(`${env.ingest.url}/v1/batch`, { batch: [track(), track(), track()] }, { headers: auth })).status).toBe(200);
    expect((await post(`${env.ingest.url}/v1/track`, track(), { headers: auth })).status).toBe(429);
    // Three messages owed: 3 ms at the new rate, 3 s at the old one.
    holder.set(config("{ messagesPerSecond: 1000 }"));
    await new Promise((r) => setTimeout(r, 50));
    expect((await post(`${env.ingest.url}/v1/track`, track(), { headers: auth })).status).toBe(200);
  });

  it("counts only what is stored: a request refused for its size and repeated messageIds take nothing (found by the diff review)", async () => {
    limitWeb("{ messagesPerSecond: 1, burst: 3 }");
    const auth = { authorization: basic(WRITE_KEY) };
    const tooBig = { batch: [...Array.from({ length: 50 }, () => track()), { ...track(), properties: { pad: "x".repeat(40 * 1024) } }] };
    expect((await post(`${env.ingest.url}/v1/batch`, tooBig, { headers: auth })).json.code).toBe("batch_item_too_large");
    // An SDK sending the same message again (a retry after a lost answer) is answered 200 each time.
    const again = track();
    for (let i = 0; i < 6; i++) expect((await post(`${env.ingest.url}/v1/track`, again, { headers: auth })).status, `send ${i}`).toBe(200);
    expect((await post(`${env.ingest.url}/v1/batch`, { batch: [track(), track()] }, { headers: auth })).status).toBe(200);
  });

  it("@segment/analytics-node waits out the 429s and gets every message stored", { timeout: 60_000 }, async () => {
    limitWeb("{ messagesPerSecond: 20, burst: 20 }");
    const analytics = new Analytics({ writeKey: WRITE_KEY, host: env.ingest.url, path: "/v1/batch", maxEventsInBatch: 15, flushInterval: 60_000, maxRetries: 3 });
    const statuses: number[] = [];
    const errors: unknown[] = [];
    analytics.on("http_response", (res) => statuses.push(res.status));
    analytics.on("error", (err) => errors.push(err));
    const ids = Array.from({ length: 60 }, () => uniqueId("rl-sdk"));
    for (const messageId of ids) analytics.track({ userId: "u1", event: "SDK Limited", messageId });
    await analytics.closeAndFlush({ timeout: 50_000 });

    expect(errors).toEqual([]);
    expect(statuses).toContain(429);
    expect(statuses.filter((s) => s === 200)).toHaveLength(4);
    const stored = new Set((await storedMessages(env.nats)).map((m) => m.body.messageId));
    expect(ids.filter((id) => !stored.has(id))).toEqual([]);
  });
});

describe("spec.rateLimit in config", () => {
  it("defaults the burst to one second's worth and refuses a limit below one message a second, naming the field", () => {
    const compiled = config("{ messagesPerSecond: 50 }");
    expect(compiled.sources.find((s) => s.name === "web")?.rateLimit).toEqual({ perSecond: 50, burst: 50 });
    expect(compiled.sources.find((s) => s.name === "app")?.rateLimit).toBeUndefined();
    expect(() => config("{ messagesPerSecond: 0 }")).toThrow(/rateLimit\/messagesPerSecond|rateLimit\.messagesPerSecond/);
  });
});
