// The official Go SDK (github.com/segmentio/analytics-go/v3 v3.3.0) works against trackhook
// unchanged: all six calls, batched to /v1/batch with Basic auth and a batch-level context that
// alone carries context.library, are stored under the right subject and Nats-Msg-Id with the
// fields as sent, and a wrong write key makes the SDK report every message as failed.
//
// The SDK is driven by test/sdk/go (a Go program using analytics.NewWithConfig as an application
// does), built into .tools/bin by scripts/tools-go-sdk.sh; see that directory for the protocol.
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { randomName } from "../harness/nats.ts";
import { WRITE_KEY, basic, storedMessages, useIngest } from "../harness/ingest.ts";
import { UUID_V4, isoNearNow, skewCorrectedMs, storedAs, type Json } from "../harness/sdk.ts";
import { builtDriver, runDriver, type DriverCall } from "../harness/sdk-driver.ts";

const env = useIngest();

const DRIVER = fileURLToPath(new URL("../../.tools/bin/trackhook-sdk-go-driver", import.meta.url));
const DRIVER_SOURCE = fileURLToPath(new URL("../sdk/go/", import.meta.url));
const BUILD_HINT = "run `npm run tools` (it builds the driver with scripts/tools-go-sdk.sh; Go >= 1.22 needed)";

/** The module version pinned in test/sdk/go/go.mod, and the version the SDK reports for itself (its Version constant). */
const SDK_MODULE_VERSION = "v3.3.0";
const SDK_VERSION = "3.0.0";
/** The driver's local zone: +05:30 all year. */
const DRIVER_TZ = "Asia/Kolkata";

/** What the driver prints: see test/sdk/go/main.go. */
interface DriverReport {
  sdk: { module: string; moduleVersion: string; version: string };
  enqueued: Array<{ type: string; error: string | null }>;
  callbacks: Array<{ outcome: "success" | "failure"; type: string; messageId: string; error: string | null }>;
  logs: Array<{ level: "info" | "error"; text: string }>;
  exchanges: Array<{
    method: string;
    url: string;
    headers: Record<string, string[]>;
    contentLength: number;
    body?: { batch: Json[]; context: Json; messageId: string; sentAt: string } & Json;
    bodyText?: string;
    response: { status: number; headers: Record<string, string[]>; body: string } | null;
    error: string | null;
  }>;
  close: { error: string | null; ms: number };
}

/**
 * Runs the SDK once: a client whose batches are sent when full or by Close (no timer flush racing
 * it), every call enqueued, then Close. The clock zone is not UTC, as on many servers, so the
 * SDK's timestamps carry an offset.
 */
function runSdk(writeKey: string, calls: DriverCall[], defaultContext?: Json): Promise<DriverReport> {
  const instructions = { endpoint: env.ingest.url, writeKey, batchSize: 100, intervalMs: 60_000, defaultContext, calls };
  // Failing (never skipping) with how to build it when it is missing or older than its source.
  const driver = builtDriver("analytics-go", DRIVER, DRIVER_SOURCE, BUILD_HINT);
  return runDriver<DriverReport>(driver, [], instructions, { timeoutMs: 15_000, env: { ...process.env, TZ: DRIVER_TZ } });
}

/** Go's time.Time in JSON: RFC 3339 with up to nine fraction digits and the zone of the driver's TZ. */
const goTimeNearNow = (value: unknown, toleranceMs = 60_000) => {
  expect(value).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?\+05:30$/);
  expect(Math.abs(Date.now() - Date.parse(value as string))).toBeLessThan(toleranceMs);
};

/**
 * A time the SDK sent (Go's RFC 3339: nanoseconds, the local offset), as stored: the same instant
 * (to the millisecond) in UTC ISO-8601, the one form trackhook stores all four timestamps in.
 */
const keptAsSent = (kept: unknown, sent: unknown) => {
  expect(typeof sent).toBe("string");
  expect(sent).not.toMatch(/Z$/); // TZ=Asia/Kolkata: the SDK's own form differs from the stored one
  expect(kept).toBe(new Date(Date.parse(sent as string)).toISOString());
};

describe("github.com/segmentio/analytics-go/v3", () => {
  it("delivers identify, track, page, screen, group and alias, stored as sent", async () => {
    const userId = randomName("user");
    const anonymousId = randomName("anon");
    const groupId = randomName("group");
    const previousId = randomName("prev");
    // An import of past data: the caller sets Timestamp (whole seconds, in another zone).
    const past = new Date(Math.floor(Date.now() / 1000) * 1000 - 2 * 86_400_000);
    const pastInNewYork = `${new Date(past.getTime() - 4 * 3_600_000).toISOString().slice(0, 19)}-04:00`;

    const report = await runSdk(
      WRITE_KEY,
      [
        { type: "identify", userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } },
        {
          type: "track",
          userId,
          event: "Order Completed",
          properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] },
          context: { locale: "de-DE", page: { path: "/checkout" } },
        },
        { type: "page", anonymousId, name: "Quickstart", properties: { category: "Docs", url: "https://example.com/docs", referrer: "" } },
        { type: "screen", userId, name: "Settings", properties: { tab: "billing" } },
        { type: "group", userId, groupId, traits: { name: "Initech", employees: 120 } },
        { type: "alias", userId, previousId },
        { type: "track", userId, event: "Trial Started", timestamp: pastInNewYork, integrations: { All: false, Webhooks: true } },
      ],
      { app: { name: "checkout-service", version: "1.4.2" } },
    );

    expect(report.sdk).toEqual({ module: "github.com/segmentio/analytics-go/v3", moduleVersion: SDK_MODULE_VERSION, version: SDK_VERSION });
    expect(report.enqueued.map((e) => e.error)).toEqual(Array(7).fill(null));
    expect(report.close.error).toBeNull();
    expect(report.logs).toEqual([]);
    expect(report.exchanges).toHaveLength(1);
    const exchange = report.exchanges[0]!;
    expect(exchange.error).toBeNull();
    expect(exchange.response).toMatchObject({ status: 200 });
    expect(JSON.parse(exchange.response!.body)).toEqual({ success: true });
    expect(exchange.method).toBe("POST");
    expect(exchange.url).toBe(`${env.ingest.url}/v1/batch`);
    expect(exchange.headers).toMatchObject({
      Authorization: [basic(WRITE_KEY)],
      "Content-Type": ["application/json"],
      "User-Agent": [`analytics-go (version: ${SDK_VERSION})`],
    });
    expect(exchange.headers).not.toHaveProperty("Content-Encoding");

    // {batch, context, messageId, sentAt}: no writeKey in the body, a messageId for the batch
    // itself, and context.library only at batch level, merged with the configured DefaultContext.
    const body = exchange.body!;
    expect(Object.keys(body).sort()).toEqual(["batch", "context", "messageId", "sentAt"]);
    expect(body.context).toEqual({ app: { name: "checkout-service", version: "1.4.2" }, library: { name: "analytics-go", version: SDK_VERSION } });
    expect(body.messageId).toMatch(UUID_V4);
    goTimeNearNow(body.sentAt);
    const sent = body.batch;
    expect(sent.map((m) => m.type)).toEqual(["identify", "track", "page", "screen", "group", "alias", "track"]);
    expect(report.callbacks).toEqual(sent.map((m) => ({ outcome: "success", type: m.type, messageId: m.messageId, error: null })));

    const stored = await storedMessages(env.nats);
    expect(stored.map((m) => m.body.messageId)).not.toContain(body.messageId);
    const byId = new Map(stored.map((m) => [m.body.messageId, m]));
    for (const item of sent) {
      const messageId = item.messageId as string;
      expect(messageId).toMatch(UUID_V4);
      expect(item).not.toHaveProperty("sentAt");
      expect(item.context === undefined || !("library" in (item.context as Json))).toBe(true);
      const kept = storedAs(byId, item.type, messageId);
      expect(kept.type).toBe(item.type);
      expect(kept).not.toHaveProperty("writeKey");
      for (const field of ["userId", "anonymousId", "event", "name", "category", "properties", "traits", "groupId", "previousId", "integrations"]) {
        expect(kept[field], `${item.type}.${field}`).toEqual(item[field]);
      }
      // The batch's context (library, app) merged under the item's own.
      expect(kept.context, `${item.type}.context`).toEqual({ ...body.context, ...(item.context as Json | undefined) });
      expect(kept.context).toMatchObject({ library: { name: "analytics-go", version: SDK_VERSION } });

      // The SDK sends only `timestamp` per item and `sentAt` per batch: they become
      // originalTimestamp and sentAt, and `timestamp` is skew-corrected from them.
      keptAsSent(kept.sentAt, body.sentAt);
      keptAsSent(kept.originalTimestamp, item.timestamp);
      isoNearNow(kept.receivedAt);
      isoNearNow(kept.timestamp, 3 * 86_400_000);
      expect(Date.parse(kept.timestamp as string)).toBe(skewCorrectedMs(kept));
      expect(Date.parse(kept.timestamp as string)).toBeLessThanOrEqual(Date.parse(kept.receivedAt as string));
    }

    // Spot checks on the values themselves, so an SDK change cannot make the loop above vacuous.
    const storedOf = (type: string, nth = 0) =>
      stored.find((m) => m.body.messageId === sent.filter((s) => s.type === type)[nth]!.messageId)!.body as unknown as Json;
    expect(storedOf("identify")).toMatchObject({ userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } });
    expect(storedOf("track")).toMatchObject({
      userId,
      event: "Order Completed",
      properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] },
      context: { locale: "de-DE", page: { path: "/checkout" }, app: { name: "checkout-service" }, library: { name: "analytics-go" } },
    });
    expect(storedOf("page")).toMatchObject({ anonymousId, name: "Quickstart", properties: { url: "https://example.com/docs", referrer: "", category: "Docs" } });
    expect(storedOf("page")).not.toHaveProperty("userId");
    expect(storedOf("screen")).toMatchObject({ userId, name: "Settings", properties: { tab: "billing" } });
    expect(storedOf("group")).toMatchObject({ userId, groupId, traits: { name: "Initech", employees: 120 } });
    expect(storedOf("alias")).toMatchObject({ userId, previousId });
    expect(storedOf("alias")).not.toHaveProperty("anonymousId");
    // The SDK stamps each call with time.Now() in the local zone; a Timestamp the caller set goes as set.
    for (const item of sent.slice(0, 6)) goTimeNearNow(item.timestamp);
    expect(sent[6]!.timestamp).toBe(pastInNewYork);
    // The imported event keeps its own time; its `timestamp` moves only by the transit time the
    // skew correction adds.
    const imported = storedOf("track", 1);
    expect(imported).toMatchObject({ event: "Trial Started", integrations: { All: false, Webhooks: true } });
    expect(Date.parse(imported.originalTimestamp as string)).toBe(past.getTime());
    expect(Date.parse(imported.timestamp as string) - past.getTime()).toBeGreaterThanOrEqual(0);
    expect(Date.parse(imported.timestamp as string) - past.getTime()).toBeLessThan(5_000);
    expect(JSON.stringify(stored)).not.toContain(WRITE_KEY);
  });

  it("accepts the SDK's largest batches: its own limits (500,000 B a batch, 32,000 B a message) are inside trackhook's", async () => {
    const userId = randomName("bulk");
    const calls: DriverCall[] = Array.from({ length: 20 }, (_, i) => ({ type: "track", userId, event: "Export Row", properties: { i, blob: "x".repeat(30_800) } }));
    const report = await runSdk(WRITE_KEY, calls);

    expect(report.enqueued.map((e) => e.error)).toEqual(Array(20).fill(null));
    expect(report.logs).toEqual([]);
    // ~31 KB a message: 16 fill a batch to just under the SDK's 500,000 bytes; the rest go at Close.
    expect(report.exchanges.map((e) => e.body!.batch.length).sort((a, b) => b - a)).toEqual([16, 4]);
    expect(report.exchanges.map((e) => e.response?.status)).toEqual([200, 200]);
    expect(Math.max(...report.exchanges.map((e) => e.contentLength))).toBeGreaterThan(490_000);
    expect(report.callbacks.map((c) => c.outcome)).toEqual(Array(20).fill("success"));

    const sentIds = report.callbacks.map((c) => c.messageId);
    const stored = (await storedMessages(env.nats)).filter((m) => m.body.userId === userId);
    expect(stored.map((m) => m.body.messageId).sort()).toEqual([...sentIds].sort());
    for (const m of stored) expect(((m.body as unknown as Json).properties as Json).blob).toHaveLength(30_800);
  });

  it("reports every message as failed for a wrong write key (401), and nothing is stored", async () => {
    const userId = randomName("rejected");
    const report = await runSdk("not-a-real-key", [
      { type: "identify", userId, traits: { plan: "free" } },
      { type: "track", userId, event: "Should Not Land" },
    ]);

    // One request: the SDK retries any failed upload (401 included) with backoff, but gives up at
    // once when the failure comes while the client is closing, as here.
    expect(report.enqueued.map((e) => e.error)).toEqual([null, null]);
    expect(report.exchanges).toHaveLength(1);
    const exchange = report.exchanges[0]!;
    expect(exchange.headers.Authorization).toEqual([`Basic ${Buffer.from("not-a-real-key:").toString("base64")}`]);
    expect(exchange.response?.status).toBe(401);
    expect(JSON.parse(exchange.response!.body)).toMatchObject({ success: false, code: "invalid_write_key" });

    const sentIds = exchange.body!.batch.map((m) => m.messageId);
    expect(sentIds).toHaveLength(2);
    expect(report.callbacks).toEqual([
      { outcome: "failure", type: "identify", messageId: sentIds[0], error: "401 401 Unauthorized" },
      { outcome: "failure", type: "track", messageId: sentIds[1], error: "401 401 Unauthorized" },
    ]);
    // The answer's body is logged (at info level) and the drop as an error.
    expect(report.logs).toEqual([
      { level: "info", text: expect.stringMatching(/^response 401 401 Unauthorized – .*invalid_write_key/) },
      { level: "error", text: "2 messages dropped because they failed to be sent and the client was closed" },
    ]);

    const stored = await storedMessages(env.nats);
    expect(stored.filter((m) => sentIds.includes(m.body.messageId) || m.body.userId === userId)).toEqual([]);
  });
});
