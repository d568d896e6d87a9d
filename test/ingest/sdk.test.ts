// The official Node SDK (@segment/analytics-node 3.1.0) works against trackhook unchanged: all six
// calls, batched to /v1/batch with Basic auth and a body writeKey, are stored under the right
// subject and Nats-Msg-Id with the fields as sent, and a wrong write key is refused with 401.
import { Analytics } from "@segment/analytics-node";
import { describe, expect, it } from "vitest";
import { randomName } from "../harness/nats.ts";
import { WRITE_KEY, storedMessages, useIngest } from "../harness/ingest.ts";
import { isoNearNow } from "../harness/sdk.ts";

const env = useIngest();

interface SdkObservations {
  errors: unknown[];
  requests: Array<{ url: string; headers: Record<string, string>; body: { batch: Array<Record<string, unknown>>; sentAt: string; writeKey?: string } }>;
  statuses: number[];
}

/** An SDK pointed at the test ingest, recording what it sent, what it got back, and every error it reports. */
function sdk(writeKey: string): { analytics: Analytics; seen: SdkObservations } {
  const analytics = new Analytics({
    writeKey,
    host: env.ingest.url,
    path: "/v1/batch",
    // One batch for the whole test, sent by closeAndFlush(); no timer-driven flush racing it.
    maxEventsInBatch: 100,
    flushInterval: 60_000,
    httpRequestTimeout: 10_000,
    // A retry would only hide a bad answer behind backoff delays.
    maxRetries: 0,
  });
  const seen: SdkObservations = { errors: [], requests: [], statuses: [] };
  analytics.on("error", (err) => seen.errors.push(err));
  analytics.on("http_request", (req) => seen.requests.push({ url: req.url, headers: req.headers, body: JSON.parse(req.body) }));
  analytics.on("http_response", (res) => seen.statuses.push(res.status));
  return { analytics, seen };
}

describe("@segment/analytics-node", () => {
  it("delivers identify, track, page, screen, group and alias, stored as sent", async () => {
    const { analytics, seen } = sdk(WRITE_KEY);
    const userId = randomName("user");
    const anonymousId = randomName("anon");
    const groupId = randomName("group");
    const previousId = randomName("prev");

    analytics.identify({ userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } });
    analytics.track({ userId, event: "Order Completed", properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] } });
    analytics.page({ anonymousId, category: "Docs", name: "Quickstart", properties: { url: "https://example.com/docs", referrer: "" } });
    analytics.screen({ userId, name: "Settings", properties: { tab: "billing" } });
    analytics.group({ userId, groupId, traits: { name: "Initech", employees: 120 } });
    analytics.alias({ userId, previousId });
    await analytics.closeAndFlush({ timeout: 20_000 });

    expect(seen.errors).toEqual([]);
    expect(seen.statuses).toEqual([200]);
    expect(seen.requests).toHaveLength(1);
    const request = seen.requests[0]!;
    expect(request.url).toBe(`${env.ingest.url}/v1/batch`);
    expect(request.headers.Authorization).toBe(`Basic ${Buffer.from(`${WRITE_KEY}:`).toString("base64")}`);
    // The SDK also repeats the key in the body; it must not end up in storage.
    expect(request.body.writeKey).toBe(WRITE_KEY);
    const sent = request.body.batch;
    expect(sent.map((m) => m.type)).toEqual(["identify", "track", "page", "screen", "group", "alias"]);

    const stored = await storedMessages(env.nats);
    const byId = new Map(stored.map((m) => [m.body.messageId, m]));
    for (const item of sent) {
      const messageId = item.messageId as string;
      expect(messageId).toMatch(/^node-next-/);
      const hit = byId.get(messageId);
      expect(hit, `stored ${item.type} ${messageId}`).toBeDefined();
      const body = hit!.body as unknown as Record<string, unknown>;
      expect(hit!.subject).toBe(`trackhook.events.default.web.${item.type}`);
      expect(hit!.msgId).toBe(`default/web/${messageId}`);
      expect(body.type).toBe(item.type);
      expect(body).not.toHaveProperty("writeKey");
      for (const field of ["userId", "anonymousId", "event", "name", "category", "properties", "traits", "groupId", "previousId"]) {
        expect(body[field], `${item.type}.${field}`).toEqual(item[field]);
      }
      expect(body.context).toMatchObject({ library: { name: "@segment/analytics-node", version: "3.1.0" } });
      expect(body.sentAt).toBe(request.body.sentAt);
      // The SDK sends only `timestamp`; it is the original timestamp, and `timestamp` is skew-corrected.
      expect(body.originalTimestamp).toBe(item.timestamp);
      isoNearNow(body.receivedAt);
      isoNearNow(body.sentAt);
      isoNearNow(body.originalTimestamp);
      isoNearNow(body.timestamp);
      expect(Date.parse(body.timestamp as string)).toBeLessThanOrEqual(Date.parse(body.receivedAt as string));
    }

    // Spot checks on the values themselves, so an SDK change cannot make the loop above vacuous.
    const storedOf = (type: string) => stored.find((m) => m.body.messageId === sent.find((s) => s.type === type)!.messageId)!.body as unknown as Record<string, unknown>;
    expect(storedOf("identify")).toMatchObject({ userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } });
    expect(storedOf("track")).toMatchObject({ userId, event: "Order Completed", properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] } });
    expect(storedOf("page")).toMatchObject({ anonymousId, name: "Quickstart", properties: { url: "https://example.com/docs", category: "Docs" } });
    expect(storedOf("page")).not.toHaveProperty("userId");
    expect(storedOf("screen")).toMatchObject({ userId, name: "Settings", properties: { tab: "billing" } });
    expect(storedOf("group")).toMatchObject({ userId, groupId, traits: { name: "Initech", employees: 120 } });
    expect(storedOf("alias")).toMatchObject({ userId, previousId });
    expect(JSON.stringify(stored)).not.toContain(WRITE_KEY);
  });

  it("gets 401 for a wrong write key, reports every event as failed, and nothing is stored", async () => {
    const { analytics, seen } = sdk("not-a-real-key");
    const userId = randomName("rejected");
    analytics.identify({ userId, traits: { plan: "free" } });
    analytics.track({ userId, event: "Should Not Land" });
    await analytics.closeAndFlush({ timeout: 20_000 });

    // 401 is not retried by the SDK: one request, one answer, one delivery failure per event.
    expect(seen.statuses).toEqual([401]);
    expect(seen.errors).toHaveLength(2);
    for (const err of seen.errors) {
      expect(err).toMatchObject({ code: "delivery_failure" });
      expect(String((err as { reason: unknown }).reason)).toContain("401");
    }

    const sentIds = seen.requests.flatMap((r) => r.body.batch.map((m) => m.messageId));
    expect(sentIds).toHaveLength(2);
    const stored = await storedMessages(env.nats);
    expect(stored.filter((m) => sentIds.includes(m.body.messageId) || m.body.userId === userId)).toEqual([]);
  });
});
