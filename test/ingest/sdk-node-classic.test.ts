// The classic Node SDK, analytics-node 6.2 (superseded by @segment/analytics-node, and still in
// many servers), works against trackhook unchanged: its axios batches to /v1/batch with Basic auth
// are stored under the right subject and Nats-Msg-Id with the fields as sent; a wrong write key gets
// a 401, which it does not retry, and nothing is stored. (It sends the first message of an instance
// at once, alone, and the rest in batches.)
import { createRequire } from "node:module";
import Analytics from "analytics-node";
import { describe, expect, it } from "vitest";
import { randomName } from "../harness/nats.ts";
import { WRITE_KEY, basic, storedMessages, useIngest } from "../harness/ingest.ts";
import { skewCorrectedMs, storedAs } from "../harness/sdk.ts";

const env = useIngest();
const VERSION = (createRequire(import.meta.url)("analytics-node/package.json") as { version: string }).version;

interface Seen {
  requests: Array<{ url: string; authorization: string; body: { batch: Array<Record<string, unknown>>; sentAt: string; timestamp: string } }>;
  statuses: number[];
  callbackErrors: Array<string | undefined>;
  handlerErrors: string[];
}

/** The SDK pointed at the test ingest; its own axios instance records what it sends and gets back. */
function sdk(writeKey: string): { analytics: Analytics; seen: Seen; callback: (err?: Error) => void } {
  // flushAt 100 and a long interval: one batch, sent by flush(); no retries hiding a bad answer.
  const seen: Seen = { requests: [], statuses: [], callbackErrors: [], handlerErrors: [] };
  // errorHandler, as the README advises: without it a failed automatic flush is an unhandled rejection.
  const analytics = new Analytics(writeKey, {
    host: env.ingest.url, flushAt: 100, flushInterval: 60_000, retryCount: 0, timeout: 10_000, errorHandler: (err) => seen.handlerErrors.push(err.message),
  });
  analytics.axiosInstance.interceptors.request.use((config) => {
    const headers = config.headers as Record<string, unknown>;
    const auth = (config as { auth?: { username: string; password?: string } }).auth;
    seen.requests.push({
      url: config.url!,
      // axios turns `auth` into the header after the interceptors run: rebuilt the same way here.
      authorization: auth ? `Basic ${Buffer.from(`${auth.username}:${auth.password ?? ""}`).toString("base64")}` : String(headers.Authorization),
      body: JSON.parse(JSON.stringify(config.data)) as Seen["requests"][number]["body"],
    });
    return config;
  });
  analytics.axiosInstance.interceptors.response.use(
    (response) => {
      seen.statuses.push(response.status);
      return response;
    },
    (error) => {
      seen.statuses.push(error.response?.status ?? 0);
      return Promise.reject(error as Error);
    },
  );
  return { analytics, seen, callback: (err) => seen.callbackErrors.push(err?.message) };
}

describe("analytics-node (classic, 6.x)", () => {
  it("delivers identify, track, page, screen, group and alias, stored as sent", async () => {
    const { analytics, seen, callback } = sdk(WRITE_KEY);
    const userId = randomName("user");
    const anonymousId = randomName("anon");
    const groupId = randomName("group");
    const previousId = randomName("prev");

    analytics.identify({ userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } }, callback);
    analytics.track({ userId, event: "Order Completed", properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] } }, callback);
    analytics.page({ anonymousId, category: "Docs", name: "Quickstart", properties: { url: "https://example.com/docs", referrer: "" } }, callback);
    analytics.screen({ userId, name: "Settings", properties: { tab: "billing" } }, callback);
    analytics.group({ userId, groupId, traits: { name: "Initech", employees: 120 } }, callback);
    analytics.alias({ userId, previousId }, callback);
    await analytics.flush();
    await expect.poll(() => seen.callbackErrors.length, { timeout: 10_000, interval: 10 }).toBe(6);

    expect(seen.handlerErrors).toEqual([]);
    expect(seen.callbackErrors).toEqual([undefined, undefined, undefined, undefined, undefined, undefined]);
    // The first message alone, at once; the other five in the batch flush() sent.
    expect(seen.requests.map((r) => r.body.batch.length)).toEqual([1, 5]);
    expect(seen.statuses).toEqual([200, 200]);
    for (const request of seen.requests) {
      expect(request.url).toBe(`${env.ingest.url}/v1/batch`);
      expect(request.authorization).toBe(basic(WRITE_KEY));
      // {batch, timestamp, sentAt}: the batch-level timestamp is not a message field and is ignored.
      expect(Object.keys(request.body).sort()).toEqual(["batch", "sentAt", "timestamp"]);
    }
    const sent = seen.requests.flatMap((r) => r.body.batch.map((item): Record<string, unknown> & { batchSentAt: string } => ({ ...item, batchSentAt: r.body.sentAt })));
    expect(sent.map((m) => m.type)).toEqual(["identify", "track", "page", "screen", "group", "alias"]);

    const stored = await storedMessages(env.nats);
    const byId = new Map(stored.map((m) => [m.body.messageId, m]));
    for (const item of sent) {
      const messageId = item.messageId as string;
      expect(messageId).toMatch(/^node-[0-9a-f]{32}-[0-9a-f-]{36}$/);
      const body = storedAs(byId, item.type, messageId);
      for (const field of ["userId", "anonymousId", "event", "name", "category", "properties", "traits", "groupId", "previousId", "_metadata"]) {
        expect(body[field], `${String(item.type)}.${field}`).toEqual(item[field]);
      }
      expect(body.context).toEqual({ library: { name: "analytics-node", version: VERSION } });
      expect(body.sentAt).toBe(item.batchSentAt);
      expect(body.originalTimestamp).toBe(item.timestamp);
      expect(Date.parse(body.timestamp as string)).toBe(skewCorrectedMs(body));
    }

    const storedOf = (type: string) => byId.get(sent.find((s) => s.type === type)!.messageId as string)!.body as unknown as Record<string, unknown>;
    expect(storedOf("identify")).toMatchObject({ userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } });
    expect(storedOf("track")).toMatchObject({ userId, event: "Order Completed", properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] } });
    expect(storedOf("page")).toMatchObject({ anonymousId, category: "Docs", name: "Quickstart", properties: { url: "https://example.com/docs", referrer: "" } });
    expect(storedOf("screen")).toMatchObject({ userId, name: "Settings", properties: { tab: "billing" } });
    expect(storedOf("group")).toMatchObject({ userId, groupId, traits: { name: "Initech", employees: 120 } });
    expect(storedOf("alias")).toMatchObject({ userId, previousId });
    expect(JSON.stringify(stored)).not.toContain(WRITE_KEY);
  });

  it("gets 401 for a wrong write key, does not retry it, tells errorHandler and every callback, and nothing is stored", async () => {
    const { analytics, seen, callback } = sdk("not-a-real-key");
    const userId = randomName("rejected");
    analytics.identify({ userId, traits: { plan: "free" } }, callback);
    analytics.track({ userId, event: "Should Not Land" }, callback);
    await analytics.flush();
    await expect.poll(() => seen.callbackErrors.length, { timeout: 10_000, interval: 10 }).toBe(2);

    // One request per flush (the first message goes alone), each answered 401 and not retried.
    expect(seen.statuses).toEqual([401, 401]);
    expect(seen.handlerErrors).toEqual(["Request failed with status code 401", "Request failed with status code 401"]);
    expect(seen.callbackErrors).toEqual(["Request failed with status code 401", "Request failed with status code 401"]);
    const sentIds = seen.requests.flatMap((r) => r.body.batch.map((m) => m.messageId));
    expect(sentIds).toHaveLength(2);
    const stored = await storedMessages(env.nats);
    expect(stored.filter((m) => sentIds.includes(m.body.messageId) || m.body.userId === userId)).toEqual([]);
  });
});
