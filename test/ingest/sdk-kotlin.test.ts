// The official Kotlin SDK (analytics-kotlin: com.segment.analytics.kotlin:core, its JVM artifact,
// pinned in test/sdk/kotlin/pom.xml) works against trackhook configured as the README tells
// mobile users, apiHost = cdnHost = "<host>/v1": it fetches /v1/projects/<key>/settings, whose
// Segment.io.apiHost keeps it on trackhook, and posts gzip'd text/plain batches to /v1/b with the
// write key in the body only; identify, track, screen, group and alias (it has no page call) are
// stored under the right subject and Nats-Msg-Id with the fields as sent.
//
// The SDK always builds https:// URLs. For the plain-HTTP test ingest the driver sets one more
// option, the SDK's Configuration.requestFactory: a RequestFactory whose openConnection swaps the
// scheme. Nothing else differs from an app's setup (see test/sdk/kotlin/src/main/kotlin/Driver.kt,
// built by scripts/tools-maven-sdk.sh kotlin into .tools/kotlin-sdk/driver.jar).
//
// When the SDK cannot fetch its settings (here: a write key trackhook does not know) and has none
// cached, it falls back on settings that say apiHost = api.segment.io/v1, whatever apiHost was
// configured, and its telemetry reports the error to api.segment.io too: the driver refuses both
// (nothing leaves the machine). Configuration.defaultSettings naming trackhook keeps the SDK on
// trackhook; there a wrong key gets 401 and the SDK drops the batch.
import { rmSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { randomName } from "../harness/nats.ts";
import { WRITE_KEY, storedMessages, useIngest } from "../harness/ingest.ts";
import { ISO_UTC_MS, UUID_V4, isoNearNow, skewCorrectedMs, storedAs, type Json } from "../harness/sdk.ts";
import { mavenDriver } from "../harness/sdk-driver.ts";
import { tempDir } from "../harness/temp.ts";

const env = useIngest();

const driver = mavenDriver("kotlin");
/** The SDK version the driver's pom.xml pins: what context.library and User-Agent must carry. */
const PINNED = driver.pinned;


type DriverCall =
  | { type: "identify"; userId: string; traits?: Json }
  | { type: "track"; event: string; properties?: Json }
  | { type: "screen"; name: string; category?: string; properties?: Json }
  | { type: "group"; groupId: string; traits?: Json }
  | { type: "alias"; newId: string };

interface Exchange {
  method: string;
  url: string;
  protocol: string;
  headers: Record<string, string[]>;
  bodyBytes?: number;
  body?: { batch: Json[]; sentAt: string; writeKey: string } & Json;
  bodyText?: string;
  response: { status: number; message: string; headers: Record<string, string[]>; body: string } | null;
  error: string | null;
}

/** What the driver prints: see test/sdk/kotlin/src/main/kotlin/Driver.kt. */
interface DriverReport {
  sdk: { artifact: string; version: string; analyticsVersion: string };
  configuration: { apiHost: string; cdnHost: string; flushAt: number; flushInterval: number; defaultSettings: Json | null };
  calls: Array<{ type: string; processed: boolean; userIdSettled: boolean }>;
  /** Each event as it left the SDK's timeline (an After plugin). */
  events: Json[];
  /** Every URL the SDK built (before the driver's http:// swap). */
  builtUrls: string[];
  exchanges: Exchange[];
  connections: Array<{ uri: string; allowed: boolean; callers: string[] }>;
  errors: Array<{ class: string; message: string | null; cause: string | null }>;
  logs: Array<{ kind: "ERROR" | "WARNING" | "DEBUG"; message: string }>;
  state: { userId: string | null; anonymousId: string; settings: Json; pendingUploads: string[]; storedFiles: string[] };
  drained: boolean;
  waitedMs: number;
  totalMs: number;
}

/**
 * Runs the SDK once in its own JVM: configured with apiHost = cdnHost = "<ingest>/v1", it makes
 * `calls`, flushes and reports once its uploads are done. Async on purpose: the ingest answering
 * the SDK lives in this process. The SDK's storage (user, settings, queued batches) starts empty
 * each run and is removed once the JVM has exited.
 */
async function runSdk(writeKey: string, calls: DriverCall[], options: Json = {}): Promise<DriverReport> {
  const storageDir = tempDir("sdk-kotlin");
  try {
    return await driver.run<DriverReport>({ host: env.ingest.url, writeKey, timeoutMs: 10_000, storageDir, calls, ...options });
  } finally {
    rmSync(storageDir, { recursive: true, force: true });
  }
}

/** What the SDK's Segment destination does to an event before queueing it: drops a blank userId and empty traits. */
const asQueued = (event: Json): Json =>
  Object.fromEntries(
    Object.entries(event).filter(
      ([k, v]) => !(k === "userId" && v === "") && !(k === "traits" && typeof v === "object" && v !== null && Object.keys(v).length === 0),
    ),
  );

const ingestHost = () => new URL(env.ingest.url).host;
const uploadsOf = (report: DriverReport) => report.exchanges.filter((e) => e.method === "POST");

/** The settings fetch every run starts with: GET <cdnHost>/projects/<key>/settings. */
function expectSettingsFetch(report: DriverReport, writeKey: string): Exchange {
  expect(report.builtUrls[0]).toBe(`https://${ingestHost()}/v1/projects/${writeKey}/settings`);
  const fetch = report.exchanges[0]!;
  expect(fetch.method).toBe("GET");
  expect(fetch.url).toBe(`${env.ingest.url}/v1/projects/${writeKey}/settings`);
  expect(fetch.headers).toMatchObject({
    "User-Agent": [`analytics-kotlin/${PINNED}`],
    "Content-Type": ["application/json; charset=utf-8"],
    "Accept-Encoding": ["gzip"],
  });
  expect(fetch.headers).not.toHaveProperty("Authorization");
  return fetch;
}

describe("analytics-kotlin (com.segment.analytics.kotlin:core)", () => {
  it("is built at the version test/sdk/kotlin/pom.xml pins", async () => {
    expect(PINNED, "no <segment.analytics.kotlin.version> in test/sdk/kotlin/pom.xml").toMatch(/^\d+\.\d+\.\d+$/);
    const report = await runSdk(WRITE_KEY, []);
    expect(report.sdk).toEqual({ artifact: "com.segment.analytics.kotlin:core", version: PINNED, analyticsVersion: PINNED });
  });

  it("delivers identify, track, screen, group and alias to /v1/b, stored as sent", async () => {
    const userId = randomName("user");
    const newId = randomName("user-new");
    const groupId = randomName("group");
    const report = await runSdk(WRITE_KEY, [
      { type: "identify", userId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } },
      { type: "track", event: "Order Completed", properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }], note: "Café ☕", coupon: null } },
      { type: "screen", name: "Settings", category: "Account", properties: { tab: "billing" } },
      { type: "group", groupId, traits: { name: "Initech", employees: 120 } },
      { type: "alias", newId },
    ]);

    // As the README says, and no more: the two hosts, no scheme.
    expect(report.configuration).toMatchObject({ apiHost: `${ingestHost()}/v1`, cdnHost: `${ingestHost()}/v1`, defaultSettings: null });
    expect(report.calls).toEqual(["identify", "track", "screen", "group", "alias"].map((type) => ({ type, processed: true, userIdSettled: true })));
    expect(report.drained).toBe(true);
    expect(report.errors).toEqual([]);
    expect(report.logs.filter((l) => l.kind !== "DEBUG")).toEqual([]);
    // No host but trackhook's: with settings fetched, the SDK's telemetry stays off (sampleRate 0).
    expect(report.connections.map((c) => [c.uri.replace(/^\w+:\/\//, ""), c.allowed])).toEqual(
      report.connections.map(() => [ingestHost(), true]),
    );

    // The settings trackhook serves keep the SDK on trackhook: their Segment.io.apiHost is the
    // ingest's own host, and the SDK posts there.
    const fetch = expectSettingsFetch(report, WRITE_KEY);
    expect(fetch.response?.status).toBe(200);
    const served = JSON.parse(fetch.response!.body) as { integrations: Record<string, Json>; metrics: Json };
    expect(served.integrations["Segment.io"]).toMatchObject({ apiKey: WRITE_KEY, apiHost: `${ingestHost()}/v1` });
    expect(served.metrics).toEqual({ sampleRate: 0 });
    expect((report.state.settings.integrations as Json)["Segment.io"]).toMatchObject({ apiHost: `${ingestHost()}/v1` });
    expect(report.builtUrls.slice(1)).toEqual(report.builtUrls.slice(1).map(() => `https://${ingestHost()}/v1/b`));

    // Normally one batch; a flush racing the first event at start-up can split it, never lose any.
    const uploads = uploadsOf(report);
    expect(uploads.length).toBeGreaterThanOrEqual(1);
    expect(report.exchanges).toHaveLength(1 + uploads.length);
    for (const upload of uploads) {
      expect(upload.url).toBe(`${env.ingest.url}/v1/b`);
      expect(upload.error).toBeNull();
      expect(upload.response?.status, upload.response?.body).toBe(200);
      expect(JSON.parse(upload.response!.body)).toEqual({ success: true });
      // gzip'd text/plain; the key only in the body, no Authorization header.
      expect(upload.headers).toMatchObject({
        "User-Agent": [`analytics-kotlin/${PINNED}`],
        "Content-Type": ["text/plain"],
        "Content-Encoding": ["gzip"],
        "Content-Length": [String(upload.bodyBytes)],
      });
      expect(upload.headers).not.toHaveProperty("Authorization");
      expect(upload.headers).not.toHaveProperty("X-Retry-Count");
      expect(upload.bodyBytes).toBeLessThan(Buffer.byteLength(JSON.stringify(upload.body)));
      expect(Object.keys(upload.body!)).toEqual(["batch", "sentAt", "writeKey"]);
      expect(upload.body!.writeKey).toBe(WRITE_KEY);
      isoNearNow(upload.body!.sentAt);
    }
    expect(report.state.storedFiles).toEqual([]);

    // What went over the wire is what left the SDK's timeline, in the order of the calls.
    const sent = uploads.flatMap((u) => u.body!.batch.map((item) => ({ item, sentAt: u.body!.sentAt })));
    const byMessageId = new Map(sent.map((s) => [s.item.messageId, s]));
    expect(report.events.map((e) => e.type)).toEqual(["identify", "track", "screen", "group", "alias"]);
    expect(sent).toHaveLength(report.events.length);
    for (const event of report.events) expect(byMessageId.get(event.messageId)?.item).toEqual(asQueued(event));

    // The SDK's identity model: identify remembers the user; every call carries the anonymousId it
    // made up; alias sends the current user as previousId and switches to the new one.
    const anonymousId = report.state.anonymousId;
    expect(anonymousId).toMatch(UUID_V4);
    expect(report.state.userId).toBe(newId);
    const [identify, track, screen, group, alias] = report.events.map((e) => byMessageId.get(e.messageId)!.item);
    expect(identify).toMatchObject({ type: "identify", userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } });
    expect(track).toMatchObject({
      type: "track",
      userId,
      anonymousId,
      event: "Order Completed",
      properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }], note: "Café ☕", coupon: null },
    });
    expect(screen).toMatchObject({ type: "screen", userId, anonymousId, name: "Settings", category: "Account", properties: { tab: "billing" } });
    expect(group).toMatchObject({ type: "group", userId, anonymousId, groupId, traits: { name: "Initech", employees: 120 } });
    expect(alias).toMatchObject({ type: "alias", userId: newId, previousId: userId, anonymousId });

    const stored = await storedMessages(env.nats);
    const storedById = new Map(stored.map((m) => [m.body.messageId, m]));
    for (const { item, sentAt } of sent) {
      const messageId = item.messageId as string;
      expect(messageId).toMatch(UUID_V4);
      const kept = storedAs(storedById, item.type, messageId);
      expect(kept).not.toHaveProperty("writeKey");
      // Every field as sent, context (library, instanceId) and _metadata included.
      for (const [field, value] of Object.entries(item)) {
        if (field !== "timestamp") expect(kept[field], `${String(item.type)}.${field}`).toEqual(value);
      }
      expect(kept.context).toEqual({ library: { name: "analytics-kotlin", version: PINNED }, instanceId: expect.stringMatching(UUID_V4) });
      // The SDK stamps each event in UTC with milliseconds and the batch when its file is closed;
      // trackhook keeps both and corrects `timestamp` for the device's clock skew.
      expect(item.timestamp).toMatch(ISO_UTC_MS);
      expect(kept.originalTimestamp).toBe(item.timestamp);
      expect(kept.sentAt).toBe(sentAt);
      isoNearNow(kept.receivedAt);
      expect(kept.timestamp).toBe(new Date(skewCorrectedMs(kept)).toISOString());
    }
    // One context.instanceId per SDK instance.
    expect(new Set(sent.map((s) => (s.item.context as Json).instanceId)).size).toBe(1);
    expect(JSON.stringify(stored)).not.toContain(WRITE_KEY);
  });

  it("accepts the SDK's largest batches: a file is closed only once past 475,000 B, so ~503 KB of JSON, under trackhook's 500 KiB", async () => {
    const calls: DriverCall[] = Array.from({ length: 17 }, (_, i) => ({ type: "track", event: "Export Row", properties: { i, blob: "x".repeat(31_000) } }));
    const report = await runSdk(WRITE_KEY, calls);

    expect(report.drained).toBe(true);
    expect(report.errors).toEqual([]);
    // ~31.4 KB an event (the SDK refuses one of 32,000 characters or more): 15 fill a file to just
    // under 475,000 B, the 16th goes in before the size check, the 17th opens the next file.
    const uploads = uploadsOf(report);
    expect(uploads.map((u) => u.body!.batch.length).sort((a, b) => b - a)).toEqual([16, 1]);
    expect(uploads.map((u) => u.response?.status)).toEqual([200, 200]);
    const largest = Math.max(...uploads.map((u) => Buffer.byteLength(JSON.stringify(u.body))));
    expect(largest).toBeGreaterThan(500_000);
    expect(largest).toBeLessThan(500 * 1024);

    const sentIds = uploads.flatMap((u) => u.body!.batch.map((m) => m.messageId));
    expect(sentIds.sort()).toEqual(report.events.map((e) => e.messageId).sort());
    const stored = (await storedMessages(env.nats)).filter((m) => sentIds.includes(m.body.messageId));
    expect(stored).toHaveLength(17);
    // No identify: the SDK sends the anonymousId alone.
    for (const m of stored) {
      expect(m.body).not.toHaveProperty("userId");
      expect(m.body.anonymousId).toBe(report.state.anonymousId);
      expect(((m.body as unknown as Json).properties as Json).blob).toHaveLength(31_000);
    }
  });

  it("a write key trackhook does not know: settings 404, and the SDK turns to api.segment.io (refused here); nothing stored", async () => {
    const userId = randomName("rejected");
    const report = await runSdk("not-a-real-key", [
      { type: "identify", userId },
      { type: "track", event: "Should Not Land" },
    ]);

    const fetch = expectSettingsFetch(report, "not-a-real-key");
    expect(fetch.response?.status).toBe(404);
    expect(JSON.parse(fetch.response!.body)).toMatchObject({ success: false, code: "not_found" });
    // The SDK repeats the GET while building its error (its HttpURLConnection shim re-executes
    // the request, headers doubled); both get the same 404.
    expect(report.exchanges.filter((e) => e.method === "GET").map((e) => e.response?.status)).toEqual([404, 404]);
    expect(report.errors[0]).toMatchObject({ class: "com.segment.analytics.kotlin.core.AnalyticsError$SettingsFail" });

    // With no settings fetched or cached, the SDK's fallback names Segment's API, not the
    // configured apiHost: the batch is for https://api.segment.io/v1/b.
    expect((report.state.settings.integrations as Json)["Segment.io"]).toEqual({ apiKey: "not-a-real-key", apiHost: "api.segment.io/v1" });
    expect(report.builtUrls.slice(1)).toEqual(["https://api.segment.io/v1/b"]);
    expect(uploadsOf(report)).toEqual([]);
    expect(report.errors).toContainEqual(expect.objectContaining({ class: "java.io.IOException", message: expect.stringContaining("refused https://api.segment.io/v1/b") }));
    // Kept for a retry.
    expect(report.state.pendingUploads).toHaveLength(1);
    // And its telemetry (on until settings turn it off) reports the failure to api.segment.io.
    expect(report.connections).toContainEqual(
      expect.objectContaining({ uri: "https://api.segment.io", allowed: false, callers: expect.arrayContaining(["com.segment.analytics.kotlin.core.Telemetry"]) }),
    );

    const sentIds = report.events.map((e) => e.messageId);
    expect(sentIds).toHaveLength(2);
    const stored = await storedMessages(env.nats);
    expect(stored.filter((m) => sentIds.includes(m.body.messageId) || m.body.userId === userId)).toEqual([]);
  });

  it("a wrong write key with defaultSettings naming trackhook: the batch gets 401 and the SDK drops it; nothing stored", async () => {
    const userId = randomName("rejected");
    const report = await runSdk(
      "not-a-real-key",
      [
        { type: "identify", userId, traits: { plan: "free" } },
        { type: "track", event: "Should Not Land" },
      ],
      { defaultSettingsApiHost: true },
    );

    expect(report.configuration.defaultSettings).toMatchObject({ integrations: { "Segment.io": { apiKey: "not-a-real-key", apiHost: `${ingestHost()}/v1` } } });
    expect(expectSettingsFetch(report, "not-a-real-key").response?.status).toBe(404);
    const uploads = uploadsOf(report);
    expect(uploads).toHaveLength(1);
    const upload = uploads[0]!;
    expect(upload.url).toBe(`${env.ingest.url}/v1/b`);
    expect(upload.body!.writeKey).toBe("not-a-real-key");
    expect(upload.response?.status).toBe(401);
    const answer = JSON.parse(upload.response!.body) as Json;
    expect(answer).toMatchObject({ success: false, code: "invalid_write_key" });
    // 401 is not retried: the batch is deleted, and the errorHandler hears of it twice.
    expect(report.errors.slice(1)).toEqual([
      { class: "com.segment.analytics.kotlin.core.HTTPException", message: `HTTP 401: Unauthorized. Response: ${upload.response!.body}`, cause: null },
      { class: "java.lang.Exception", message: "Batch dropped due to non-retryable HTTP 401", cause: null },
    ]);
    expect(report.logs).toContainEqual({ kind: "ERROR", message: "Payloads were rejected by server. Marked for removal." });
    expect(report.state.storedFiles).toEqual([]);
    expect(report.drained).toBe(true);

    const sentIds = upload.body!.batch.map((m) => m.messageId);
    expect(sentIds).toEqual(report.events.map((e) => e.messageId));
    const stored = await storedMessages(env.nats);
    expect(stored.filter((m) => sentIds.includes(m.body.messageId) || m.body.userId === userId)).toEqual([]);
  });
});
