// The official Java SDK (analytics-java: com.segment.analytics.java:analytics, pinned in
// test/sdk/java/pom.xml) against trackhook, configured as its javadoc says:
// Analytics.builder(writeKey).endpoint("<host>") ("an endpoint (host only)"). The SDK then posts
// every batch to "<host>/v1/import/" (its Builder appends DEFAULT_PATH = "/v1/import/", trailing
// slash included; it has done so for years, and it is also its default URL on api.segment.io).
//
// Found here: trackhook served /v1/import but not /v1/import/, so every batch got 404 not_found,
// which the SDK does not retry: it reported each message as failed and dropped it. The ingest now
// ignores trailing (and doubled) slashes; the first test below is the regression test.
//
// With the SDK's other option, setUploadURL("<host>/v1/import") (a whole URL, used as given), the
// remaining tests show the rest: identify, track, page, screen, group and alias,
// one JSON batch (no gzip, no Authorization header: the write key only in the body, with a batch
// context carrying context.library and an instanceId, and a `sequence`), are stored under the right
// subject and Nats-Msg-Id with the fields as sent; the SDK's largest batches fit; a wrong write key
// gets 401, which the SDK does not retry either.
//
// The SDK is driven by test/sdk/java (Driver.java: the calls through the SDK's MessageBuilders, a
// Callback, flush() and shutdown() as an application does), built by scripts/tools-maven-sdk.sh java
// into .tools/java-sdk/driver.jar; see Driver.java for what it configures (to observe, nothing
// more).
import { describe, expect, it } from "vitest";
import { randomName } from "../harness/nats.ts";
import { WRITE_KEY, storedMessages, useIngest } from "../harness/ingest.ts";
import { ISO_UTC_MS, UUID_V4, isoNearNow, skewCorrectedMs, storedAs, type Json } from "../harness/sdk.ts";
import { mavenDriver, type DriverCall as SharedDriverCall } from "../harness/sdk-driver.ts";

const env = useIngest();

const driver = mavenDriver("java");
/** The SDK version the driver's pom.xml pins: what context.library and User-Agent must carry. */
const PINNED = driver.pinned;
/** The SDK's own limits (AnalyticsClient): 32 KiB a message, 500 KiB a batch; trackhook's are the same. */
const SDK_MSG_MAX = 32 * 1024;
const SDK_BATCH_MAX = 500 * 1024;


/** One call, made through the SDK's MessageBuilder of that type; see test/sdk/java/.../Driver.java. */
interface DriverCall extends SharedDriverCall {
  category?: string;
  via?: "enqueue" | "offer";
}

interface Exchange {
  method: string;
  url: string;
  protocol: string | null;
  headers: Record<string, string[]>;
  bodyBytes?: number;
  bodyText?: string;
  body?: { batch: Json[]; sentAt: string; context: Json; sequence: number; writeKey: string } & Json;
  response: { status: number; message: string; headers: Record<string, string[]>; body: string } | null;
  error: string | null;
}

/** What the driver prints: see test/sdk/java/src/main/java/io/trackhook/sdkdriver/Driver.java. */
interface DriverReport {
  sdk: { artifact: string; version: string };
  configuration: { endpoint: string; uploadURL: string | null };
  calls: Array<{ type: string; via: string; taken?: boolean; error: string | null }>;
  callbacks: Array<{ outcome: "success" | "failure"; type: string; messageId: string; error: string | null }>;
  exchanges: Exchange[];
  connections: Array<{ uri: string; allowed: boolean }>;
  logs: Array<{ level: "VERBOSE" | "DEBUG" | "ERROR"; text: string; error: string | null }>;
  drained: boolean;
  shutdownMs: number;
  waitedMs: number;
  totalMs: number;
}

/** How the SDK is pointed at trackhook: its endpoint(host) option, or setUploadURL(url). */
type Target = { endpoint: true } | { uploadURL: string };
const viaEndpoint: Target = { endpoint: true };
const viaUploadURL = (): Target => ({ uploadURL: `${env.ingest.url}/v1/import` });

/**
 * Runs the SDK once in its own JVM: every call enqueued, then flush() and shutdown(), and the
 * driver waits for every message's callback. Async on purpose: the ingest answering the SDK lives
 * in this process.
 */
function runSdk(writeKey: string, target: Target, calls: DriverCall[]): Promise<DriverReport> {
  return driver.run<DriverReport>({ host: env.ingest.url, writeKey, timeoutMs: 10_000, ...("uploadURL" in target ? { uploadURL: target.uploadURL } : {}), calls });
}

const ingestAuthority = () => new URL(env.ingest.url).host;

/** Nothing but the ingest was connected to (OkHttp asks for http:// and the socket for socket://). */
function expectOnlyIngest(report: DriverReport) {
  expect(report.connections.length).toBeGreaterThan(0);
  for (const c of report.connections) expect([c.uri.replace(/^\w+:\/\//, ""), c.allowed]).toEqual([ingestAuthority(), true]);
}

/** The headers of every upload: JSON, the SDK's User-Agent, the key only in the body. */
function expectUploadHeaders(exchange: Exchange) {
  expect(exchange.method).toBe("POST");
  expect(exchange.protocol).toBe("http/1.1");
  expect(exchange.headers).toEqual({
    "Content-Type": ["application/json; charset=UTF-8"],
    "Content-Length": [String(exchange.bodyBytes)],
    Host: [ingestAuthority()],
    Connection: ["Keep-Alive"],
    "Accept-Encoding": ["gzip"],
    "User-Agent": [`analytics-java/${PINNED}`],
  });
}

describe("analytics-java (com.segment.analytics.java:analytics)", () => {
  it("configured with endpoint(host), as documented, posts to <host>/v1/import/ (trailing slash), which must be accepted", async () => {
    const userId = randomName("user");
    const report = await runSdk(WRITE_KEY, viaEndpoint, [
      { type: "identify", userId, traits: { plan: "pro" } },
      { type: "track", userId, event: "Signed Up" },
    ]);

    expect(report.sdk).toEqual({ artifact: "com.segment.analytics.java:analytics", version: PINNED });
    expect(report.configuration).toEqual({ endpoint: `${env.ingest.url}/v1/import/`, uploadURL: null });
    expect(report.drained).toBe(true);
    expectOnlyIngest(report);
    expect(report.exchanges).toHaveLength(1);
    const exchange = report.exchanges[0]!;
    expect(exchange.url).toBe(`${env.ingest.url}/v1/import/`);
    expectUploadHeaders(exchange);
    // Segment's API serves the SDK's own default URL, https://api.segment.io/v1/import/. A 404 here
    // would lose both messages: the SDK retries only 5xx, 429 and I/O errors.
    expect(exchange.response?.status, `POST /v1/import/ answered: ${exchange.response?.body}`).toBe(200);
    expect(JSON.parse(exchange.response!.body)).toEqual({ success: true });
    const sentIds = exchange.body!.batch.map((m) => m.messageId as string);
    expect(report.callbacks).toEqual(exchange.body!.batch.map((m) => ({ outcome: "success", type: m.type, messageId: m.messageId, error: null })));
    const stored = await storedMessages(env.nats);
    expect(stored.filter((m) => sentIds.includes(m.body.messageId)).map((m) => m.subject).sort()).toEqual([
      "trackhook.events.default.web.identify",
      "trackhook.events.default.web.track",
    ]);
  });

  it("delivers identify, track, page, screen, group and alias in one batch to /v1/import (setUploadURL), stored as sent", async () => {
    const userId = randomName("user");
    const anonymousId = randomName("anon");
    const groupId = randomName("group");
    const previousId = randomName("prev");
    // An import of past data: the caller sets timestamp (a Date; given here with an offset).
    const past = Date.now() - 2 * 86_400_000;
    const pastInNewYork = `${new Date(past - 4 * 3_600_000).toISOString().slice(0, 23)}-04:00`;
    const calls: DriverCall[] = [
      { type: "identify", userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3, address: { city: "Zürich" } } },
      {
        type: "track",
        userId,
        event: "Order Completed",
        properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }, null], note: "Café ☕ <b>&</b>", coupon: null },
        context: { ip: "203.0.113.7", locale: "de-DE", page: { path: "/checkout" } },
      },
      { type: "page", anonymousId, name: "Quickstart", category: "Docs", properties: { url: "https://example.com/docs", referrer: "" } },
      { type: "screen", userId, name: "Settings", properties: { tab: "billing" } },
      { type: "group", userId, groupId, traits: { name: "Initech", employees: 120 } },
      { type: "alias", userId, previousId },
      { type: "track", userId, event: "Trial Started", timestamp: pastInNewYork, integrations: { All: false, Webhooks: true, Amplitude: { session_id: 7 } } },
    ];
    const report = await runSdk(WRITE_KEY, viaUploadURL(), calls);

    expect(report.sdk).toEqual({ artifact: "com.segment.analytics.java:analytics", version: PINNED });
    expect(report.configuration).toEqual({ endpoint: `${env.ingest.url}/v1/import`, uploadURL: `${env.ingest.url}/v1/import` });
    expect(report.calls.map((c) => c.error)).toEqual(calls.map(() => null));
    expect(report.drained).toBe(true);
    expect(report.logs.filter((l) => l.level !== "VERBOSE")).toEqual([]);
    expectOnlyIngest(report);

    // All seven in one batch: flush() after the last call (the SDK's own flushes come every 10 s
    // or at 250 messages).
    expect(report.exchanges).toHaveLength(1);
    const exchange = report.exchanges[0]!;
    expect(exchange.url).toBe(`${env.ingest.url}/v1/import`);
    expect(exchange.error).toBeNull();
    expect(exchange.response?.status, exchange.response?.body).toBe(200);
    expect(JSON.parse(exchange.response!.body)).toEqual({ success: true });
    // Plain JSON (no gzip); no Authorization header.
    expectUploadHeaders(exchange);
    expect(exchange.bodyBytes).toBe(Buffer.byteLength(exchange.bodyText!));

    // {batch, sentAt, context, sequence, writeKey}: the library only in the batch's context.
    const body = exchange.body!;
    expect(Object.keys(body)).toEqual(["batch", "sentAt", "context", "sequence", "writeKey"]);
    expect(body.context).toEqual({ library: { name: "analytics-java", version: PINNED }, instanceId: expect.stringMatching(UUID_V4) });
    expect(body.sequence).toBe(1);
    expect(body.writeKey).toBe(WRITE_KEY);
    isoNearNow(body.sentAt);
    const sent = body.batch;
    expect(sent.map((m) => m.type)).toEqual(calls.map((c) => c.type));
    expect(report.callbacks).toEqual(sent.map((m) => ({ outcome: "success", type: m.type, messageId: m.messageId, error: null })));

    // What the SDK's Gson makes of the calls: integrations always present ({} by default), a
    // context only where the caller gave one, no sentAt per message, a null property left out (but
    // not a null in an array), and <, > and & escaped as \u003c, \u003e, \u0026.
    for (const item of sent) {
      expect(item.messageId).toMatch(UUID_V4);
      expect(item.timestamp).toMatch(ISO_UTC_MS);
      expect(item).not.toHaveProperty("sentAt");
      expect(item.integrations).toBeDefined();
    }
    expect(sent.map((m) => "context" in m)).toEqual([false, true, false, false, false, false, false]);
    expect(sent[0]!.integrations).toEqual({});
    expect(sent[1]!.properties).toEqual({ orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }, null], note: "Café ☕ <b>&</b>" });
    expect(exchange.bodyText).toContain(String.raw`"note":"Café ☕ \u003cb\u003e\u0026\u003c/b\u003e"`);
    for (const item of sent.slice(0, 6)) isoNearNow(item.timestamp);
    expect(sent[6]!.timestamp).toBe(new Date(past).toISOString());

    const stored = await storedMessages(env.nats);
    const byId = new Map(stored.map((m) => [m.body.messageId, m]));
    for (const item of sent) {
      const messageId = item.messageId as string;
      const kept = storedAs(byId, item.type, messageId);
      expect(kept).not.toHaveProperty("writeKey");
      expect(kept).not.toHaveProperty("sequence");
      // Every field as sent.
      for (const [field, value] of Object.entries(item)) {
        if (field !== "timestamp" && field !== "context") expect(kept[field], `${String(item.type)}.${field}`).toEqual(value);
      }
      // The batch's context (library, instanceId) merged under the item's own.
      expect(kept.context, `${String(item.type)}.context`).toEqual({ ...body.context, ...(item.context as Json | undefined) });
      // The SDK sends `timestamp` per message and `sentAt` per batch, both UTC with milliseconds:
      // kept as originalTimestamp and sentAt, and `timestamp` is skew-corrected from them.
      expect(kept.originalTimestamp).toBe(item.timestamp);
      expect(kept.sentAt).toBe(body.sentAt);
      isoNearNow(kept.receivedAt);
      expect(kept.timestamp).toBe(new Date(skewCorrectedMs(kept)).toISOString());
      expect(Date.parse(kept.timestamp as string)).toBeLessThanOrEqual(Date.parse(kept.receivedAt as string));
    }

    // Spot checks on the values themselves, so an SDK change cannot make the loop above vacuous.
    const storedOf = (i: number) => byId.get(sent[i]!.messageId as string)!.body as unknown as Json;
    expect(storedOf(0)).toMatchObject({ type: "identify", userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3, address: { city: "Zürich" } } });
    expect(storedOf(1)).toMatchObject({
      type: "track",
      userId,
      event: "Order Completed",
      properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }, null], note: "Café ☕ <b>&</b>" },
      context: { ip: "203.0.113.7", locale: "de-DE", page: { path: "/checkout" }, library: { name: "analytics-java", version: PINNED } },
    });
    expect(storedOf(1).properties).not.toHaveProperty("coupon");
    expect(storedOf(2)).toMatchObject({ type: "page", anonymousId, name: "Quickstart", category: "Docs", properties: { url: "https://example.com/docs", referrer: "" } });
    expect(storedOf(2)).not.toHaveProperty("userId");
    expect(storedOf(3)).toMatchObject({ type: "screen", userId, name: "Settings", properties: { tab: "billing" } });
    expect(storedOf(4)).toMatchObject({ type: "group", userId, groupId, traits: { name: "Initech", employees: 120 } });
    expect(storedOf(5)).toMatchObject({ type: "alias", userId, previousId });
    expect(storedOf(5)).not.toHaveProperty("anonymousId");
    // The imported event keeps its own time; its `timestamp` moves only by the transit time the
    // skew correction adds.
    const imported = storedOf(6);
    expect(imported).toMatchObject({ event: "Trial Started", integrations: { All: false, Webhooks: true, Amplitude: { session_id: 7 } } });
    expect(imported.originalTimestamp).toBe(new Date(past).toISOString());
    expect(Date.parse(imported.timestamp as string) - past).toBeGreaterThanOrEqual(0);
    expect(Date.parse(imported.timestamp as string) - past).toBeLessThan(5_000);
    // One instanceId per SDK instance (a static of its AnalyticsClient).
    expect(new Set(sent.map((m) => ((byId.get(m.messageId as string)!.body as unknown as Json).context as Json).instanceId)).size).toBe(1);
    expect(JSON.stringify(stored)).not.toContain(WRITE_KEY);
  });

  it(`accepts the SDK's largest batches: it caps a batch at ${SDK_BATCH_MAX} B and a message at ${SDK_MSG_MAX} B, trackhook's own limits`, async () => {
    const userId = randomName("bulk");
    // Messages of just under 32 KiB, the most the SDK's enqueue() takes (it throws above).
    const rows = (via: "enqueue" | "offer"): DriverCall[] =>
      Array.from({ length: 16 }, (_, i) => ({ type: "track", userId, event: "Export Row", properties: { i, via, blob: "x".repeat(32_500) }, via }));
    // enqueue() counts the bytes it has queued and forces a flush once another message would take
    // them to 90% of 500 KiB (460,800 B): 14 such messages a batch. offer() skips that count, and
    // only the batch's own bound applies (messages + context + 1,143 B of slack <= 500 KiB): 15.
    const enqueued = await runSdk(WRITE_KEY, viaUploadURL(), rows("enqueue"));
    const offered = await runSdk(WRITE_KEY, viaUploadURL(), rows("offer"));

    for (const [report, sizes] of [
      [enqueued, [14, 2]],
      [offered, [15, 1]],
    ] as const) {
      expect(report.calls.map((c) => c.error)).toEqual(Array(16).fill(null));
      expect(report.drained).toBe(true);
      expect(report.logs.filter((l) => l.level !== "VERBOSE")).toEqual([]);
      expect(report.exchanges.map((e) => e.body!.batch.length)).toEqual(sizes);
      expect(report.exchanges.map((e) => e.response?.status)).toEqual([200, 200]);
      for (const e of report.exchanges) {
        expect(e.url).toBe(`${env.ingest.url}/v1/import`);
        expect(e.bodyBytes).toBeLessThanOrEqual(SDK_BATCH_MAX);
        for (const item of e.body!.batch) {
          expect(Buffer.byteLength(JSON.stringify(item))).toBeGreaterThan(32_600);
          expect(Buffer.byteLength(JSON.stringify(item))).toBeLessThanOrEqual(SDK_MSG_MAX);
        }
      }
      expect(report.callbacks.map((c) => c.outcome)).toEqual(Array(16).fill("success"));
    }
    expect(enqueued.exchanges[0]!.bodyBytes).toBeGreaterThan(455_000);
    expect(offered.exchanges[0]!.bodyBytes).toBeGreaterThan(488_000);

    const sentIds = [enqueued, offered].flatMap((r) => r.callbacks.map((c) => c.messageId));
    const stored = (await storedMessages(env.nats)).filter((m) => m.body.userId === userId);
    expect(stored.map((m) => m.body.messageId).sort()).toEqual([...sentIds].sort());
    for (const m of stored) expect(((m.body as unknown as Json).properties as Json).blob).toHaveLength(32_500);
  });

  it("a wrong write key: 401, which the SDK does not retry; each message's Callback hears of the failure, and nothing is stored", async () => {
    const userId = randomName("rejected");
    const report = await runSdk("not-a-real-key", viaUploadURL(), [
      { type: "identify", userId, traits: { plan: "free" } },
      { type: "track", userId, event: "Should Not Land" },
    ]);

    expect(report.drained).toBe(true);
    // One request: the SDK retries (with backoff from 15 s) only 5xx, 429 and I/O errors.
    expect(report.exchanges).toHaveLength(1);
    const exchange = report.exchanges[0]!;
    expectUploadHeaders(exchange);
    expect(exchange.body!.writeKey).toBe("not-a-real-key");
    expect(exchange.response?.status).toBe(401);
    expect(JSON.parse(exchange.response!.body)).toMatchObject({ success: false, code: "invalid_write_key" });

    // The failure is the answer's body, wrapped in an IOException.
    const sentIds = exchange.body!.batch.map((m) => m.messageId as string);
    expect(sentIds).toHaveLength(2);
    expect(report.callbacks).toEqual([
      { outcome: "failure", type: "identify", messageId: sentIds[0], error: `java.io.IOException: ${exchange.response!.body}` },
      { outcome: "failure", type: "track", messageId: sentIds[1], error: `java.io.IOException: ${exchange.response!.body}` },
    ]);
    expect(report.logs.filter((l) => l.level !== "VERBOSE")).toEqual([{ level: "DEBUG", text: "Could not upload batch 1. Giving up.", error: null }]);

    const stored = await storedMessages(env.nats);
    expect(stored.filter((m) => sentIds.includes(m.body.messageId) || m.body.userId === userId)).toEqual([]);
  });
});
