// The official Python SDK (segment-analytics-python, pinned in scripts/versions.sh) works
// against trackhook unchanged: all six calls, batched to /v1/batch with Basic auth plus a body
// writeKey, plain or gzip, are stored under the right subject and Nats-Msg-Id with the fields as
// sent (timestamps in UTC), and a wrong write key comes back to the SDK's on_error as a 401 APIError.
// The SDK runs in its own process (test/sdk/python/send.py, in the venv `npm run tools` builds).
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { randomName } from "../harness/nats.ts";
import { WRITE_KEY, basic, storedMessages, useIngest } from "../harness/ingest.ts";
import { ISO_UTC_MS, UUID_V4, storedAs, type Json } from "../harness/sdk.ts";
import { runDriver } from "../harness/sdk-driver.ts";

const env = useIngest();

const repo = fileURLToPath(new URL("../../", import.meta.url));
const PYTHON = `${repo}.tools/python-sdk/bin/python`;
const DRIVER = `${repo}test/sdk/python/send.py`;
/** The version the installer pins: the one context.library must carry. */
const VERSIONS = `${repo}scripts/versions.sh`;
const PINNED = /^SEGMENT_PYTHON_VERSION=(\S+)$/m.exec(readFileSync(VERSIONS, "utf8"))?.[1];

interface SentBatch {
  batch: Json[];
  sentAt: string;
  writeKey?: string;
}
interface DriverReport {
  sdk: { name: string; version: string };
  calls: Array<{ method: string; queued: boolean; message: Json }>;
  requests: Array<{
    method: string;
    url: string;
    headers: Record<string, string>;
    bodyBytes: number;
    body: SentBatch;
    status: number;
    responseHeaders: Record<string, string>;
    responseText: string;
  }>;
  errors: Array<{ type: string; text: string; messageIds: string[]; status?: number; code?: string; message?: string }>;
}

/**
 * Runs the driver: the SDK pointed at the test ingest makes `calls`, shuts down, and reports what
 * it sent, what it got back and what it passed to on_error. Async on purpose: the ingest answering
 * the SDK lives in this process.
 */
async function runSdk(writeKey: string, calls: Array<{ method: string; kwargs: Json }>, options: Json = {}): Promise<DriverReport> {
  if (!existsSync(PYTHON)) {
    throw new Error(`The Segment Python SDK venv is missing (${PYTHON}): run \`npm run tools\` (it runs scripts/tools-python-sdk.sh)`);
  }
  // A retry would only hide a bad answer behind backoff delays; 10 s bounds a hung request.
  const instructions = { host: env.ingest.url, writeKey, options: { max_retries: 0, timeout: 10, ...options }, calls };
  const report = await runDriver<DriverReport>(PYTHON, [DRIVER], instructions, { timeoutMs: 20_000, env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" } });
  expect(report.sdk.version, `the venv has analytics-python ${report.sdk.version}, the installer pins ${PINNED}: run \`npm run tools\``).toBe(PINNED);
  return report;
}

/** A date-time string near the test's clock. The SDK writes `+00:00` offsets, trackhook `Z`. */
const nearNow = (value: unknown, toleranceMs = 60_000) => {
  expect(typeof value).toBe("string");
  const ms = Date.parse(value as string);
  expect(Number.isNaN(ms), `${String(value)} parses`).toBe(false);
  expect(Math.abs(Date.now() - ms)).toBeLessThan(toleranceMs);
  return ms;
};

describe("segment-analytics-python", () => {
  it("is installed in .tools/python-sdk at the version the installer pins", () => {
    expect(PINNED, `no SEGMENT_PYTHON_VERSION= line in ${VERSIONS}`).toMatch(/^\d+\.\d+\.\d+$/);
    expect(existsSync(PYTHON), `the Segment Python SDK venv is missing (${PYTHON}): run \`npm run tools\``).toBe(true);
  });

  it.each([
    { label: "plain JSON (the default)", gzip: false },
    { label: "gzip (analytics.gzip = True)", gzip: true },
  ])("delivers identify, track, page, screen, group and alias, stored as sent: $label", async ({ gzip }) => {
    const userId = randomName("user");
    const anonymousId = randomName("anon");
    const groupId = randomName("group");
    const previousId = randomName("prev");
    const report = await runSdk(
      WRITE_KEY,
      [
        { method: "identify", kwargs: { user_id: userId, anonymous_id: anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } } },
        { method: "track", kwargs: { user_id: userId, event: "Order Completed", properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] } } },
        {
          method: "page",
          kwargs: { anonymous_id: anonymousId, category: "Docs", name: "Quickstart", properties: { url: "https://example.com/docs", title: "Café ☕", referrer: "" } },
        },
        { method: "screen", kwargs: { user_id: userId, name: "Settings", properties: { tab: "billing" } } },
        { method: "group", kwargs: { user_id: userId, group_id: groupId, traits: { name: "Initech", employees: 120 } } },
        { method: "alias", kwargs: { previous_id: previousId, user_id: userId } },
      ],
      gzip ? { gzip: true } : {},
    );

    expect(report.errors).toEqual([]);
    expect(report.calls.map((c) => [c.method, c.queued])).toEqual(["identify", "track", "page", "screen", "group", "alias"].map((m) => [m, true]));
    // The consumer thread batches what arrives within 0.5 s: normally one request, never a lost one.
    expect(report.requests.length).toBeGreaterThanOrEqual(1);
    for (const request of report.requests) {
      expect(request.status, request.responseText).toBe(200);
      expect(JSON.parse(request.responseText)).toEqual({ success: true });
      expect(request.method).toBe("POST");
      expect(request.url).toBe(`${env.ingest.url}/v1/batch`);
      expect(request.headers.Authorization).toBe(basic(WRITE_KEY));
      expect(request.headers["Content-Type"]).toBe("application/json");
      expect(request.headers["User-Agent"]).toBe(`analytics-python/${PINNED}`);
      expect(request.headers["Content-Encoding"]).toBe(gzip ? "gzip" : undefined);
      expect(request.headers).not.toHaveProperty("X-Retry-Count");
      // The SDK also repeats the key in the body; it must not end up in storage.
      expect(Object.keys(request.body).sort()).toEqual(["batch", "sentAt", "writeKey"]);
      expect(request.body.writeKey).toBe(WRITE_KEY);
      expect(request.body.sentAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$/);
    }
    if (gzip) {
      const plainLength = report.requests.reduce((sum, r) => sum + Buffer.byteLength(JSON.stringify(r.body)), 0);
      expect(report.requests.reduce((sum, r) => sum + r.bodyBytes, 0)).toBeLessThan(plainLength);
    }
    const sent = report.requests.flatMap((r) => r.body.batch.map((item) => ({ item, sentAt: r.body.sentAt })));
    // What went over the wire is exactly what each call returned as queued.
    expect(sent.map((s) => s.item)).toEqual(report.calls.map((c) => c.message));
    expect(sent.map((s) => s.item.type)).toEqual(["identify", "track", "page", "screen", "group", "alias"]);

    const stored = await storedMessages(env.nats);
    const byId = new Map(stored.map((m) => [m.body.messageId, m]));
    for (const { item, sentAt } of sent) {
      const messageId = item.messageId as string;
      expect(messageId).toMatch(UUID_V4);
      const body = storedAs(byId, item.type, messageId);
      expect(body.type).toBe(item.type);
      expect(body).not.toHaveProperty("writeKey");
      // The SDK sends every field of the call, null when not given; trackhook drops the nulls.
      for (const field of ["userId", "anonymousId", "event", "name", "category", "properties", "traits", "groupId", "previousId", "integrations"]) {
        if (item[field] === null || item[field] === undefined) expect(body, `${String(item.type)}.${field}`).not.toHaveProperty(field);
        else expect(body[field], `${String(item.type)}.${field}`).toEqual(item[field]);
      }
      expect(item.integrations).toEqual({});
      expect(body.context).toEqual(item.context);
      expect(body.context).toEqual({ library: { name: "analytics-python", version: PINNED } });
      // The SDK sends only `timestamp` (millisecond precision, +00:00); it is the original
      // timestamp, and `timestamp` is corrected for skew with the batch's sentAt. All four are
      // stored in one form, UTC with milliseconds ("Z", not "+00:00"; microseconds cut).
      expect(item.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$/);
      expect(body.sentAt).toBe(new Date(sentAt).toISOString());
      expect(body.originalTimestamp).toBe(new Date(item.timestamp as string).toISOString());
      expect(body.sentAt).toMatch(ISO_UTC_MS);
      expect(body.originalTimestamp).toMatch(ISO_UTC_MS);
      expect(body.receivedAt).toMatch(ISO_UTC_MS);
      expect(body.timestamp).toMatch(ISO_UTC_MS);
      const receivedAt = nearNow(body.receivedAt);
      const original = nearNow(body.originalTimestamp);
      const sentAtMs = nearNow(body.sentAt);
      const timestamp = nearNow(body.timestamp);
      expect(sentAtMs).toBeGreaterThanOrEqual(original);
      expect(timestamp).toBe(receivedAt - (sentAtMs - original));
      expect(timestamp).toBeLessThanOrEqual(receivedAt);
    }

    // Spot checks on the values themselves, so an SDK change cannot make the loop above vacuous.
    const storedOf = (type: string) => byId.get(sent.find((s) => s.item.type === type)!.item.messageId as string)!.body as unknown as Json;
    expect(storedOf("identify")).toMatchObject({ userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } });
    expect(storedOf("track")).toMatchObject({ userId, event: "Order Completed", properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] } });
    expect(storedOf("track")).not.toHaveProperty("anonymousId");
    expect(storedOf("page")).toMatchObject({
      anonymousId,
      category: "Docs",
      name: "Quickstart",
      properties: { url: "https://example.com/docs", title: "Café ☕", referrer: "" },
    });
    expect(storedOf("page")).not.toHaveProperty("userId");
    expect(storedOf("screen")).toMatchObject({ userId, name: "Settings", properties: { tab: "billing" } });
    expect(storedOf("screen")).not.toHaveProperty("category");
    expect(storedOf("group")).toMatchObject({ userId, groupId, traits: { name: "Initech", employees: 120 } });
    expect(storedOf("alias")).toMatchObject({ userId, previousId });
    expect(JSON.stringify(stored)).not.toContain(WRITE_KEY);
  });

  it("gets 401 for a wrong write key, reports the batch to on_error, and nothing is stored", async () => {
    const userId = randomName("rejected");
    const report = await runSdk("not-a-real-key", [
      { method: "identify", kwargs: { user_id: userId, traits: { plan: "free" } } },
      { method: "track", kwargs: { user_id: userId, event: "Should Not Land" } },
    ]);

    // 401 is not retryable for the SDK: one request, one answer, one on_error call for the batch.
    expect(report.requests.map((r) => r.status)).toEqual([401]);
    const request = report.requests[0]!;
    expect(request.headers.Authorization).toBe(basic("not-a-real-key"));
    expect(JSON.parse(request.responseText)).toMatchObject({ success: false, code: "invalid_write_key" });
    const sentIds = request.body.batch.map((m) => m.messageId as string);
    expect(sentIds).toEqual(report.calls.map((c) => c.message.messageId));
    // The SDK reads `code` and `message` from the JSON error body into its APIError.
    expect(report.errors).toEqual([
      {
        type: "APIError",
        status: 401,
        code: "invalid_write_key",
        message: "Unknown or disabled write key",
        text: "[Segment] invalid_write_key: Unknown or disabled write key (401)",
        messageIds: sentIds,
      },
    ]);

    const stored = await storedMessages(env.nats);
    expect(stored.filter((m) => sentIds.includes(m.body.messageId) || m.body.userId === userId)).toEqual([]);
  });
});
