// The pure rules of webhook delivery: routing by integrations, the body and its signatures, how
// an HTTP answer is classified, how URLs combine, the backoff, and the backlog gauges.
import { createHmac, createSecretKey } from "node:crypto";
import { describe, expect, it } from "vitest";
import { routesTo } from "../../dataplane/delivery/routing.ts";
import { SIGNATURE_HEADER, signingKeys, standardWebhookHeaders, webhookBody, xSignature, type DeliverableMessage } from "../../dataplane/delivery/payload.ts";
import { DeliveryMetrics } from "../../dataplane/delivery/metrics.ts";
import { DELIVERY_ID_HEADER, changeOf, pullAhead, redactUrl } from "../../dataplane/delivery/worker.ts";
import { RESERVED_WEBHOOK_HEADERS } from "../../schema/resources.ts";
import type { CompiledDestination } from "../../schema/mod.ts";
import { RETRY_AFTER_BOUNDS_MS, backoffMs, classifyStatus, combine, nextRoundDelayMs, parseRetryAfter } from "../../dataplane/delivery/outcome.ts";

const track = (integrations?: Record<string, unknown>) => ({ type: "track" as const, ...(integrations ? { integrations } : {}) });

describe("routing by integrations", () => {
  it("delivers when integrations is absent", () => expect(routesTo(track(), "crm")).toBe(true));
  it("the destination's own name wins over Webhooks and All", () => {
    expect(routesTo(track({ crm: true, Webhooks: false, All: false }), "crm")).toBe(true);
    expect(routesTo(track({ crm: false, Webhooks: true, All: true }), "crm")).toBe(false);
  });
  it("Webhooks wins over All", () => {
    expect(routesTo(track({ Webhooks: true, All: false }), "crm")).toBe(true);
    expect(routesTo(track({ Webhooks: false }), "crm")).toBe(false);
  });
  it("All: false turns off what is not named", () => expect(routesTo(track({ All: false, Salesforce: true }), "crm")).toBe(false));
  it("keys are case-sensitive", () => expect(routesTo(track({ CRM: false, webhooks: false }), "crm")).toBe(true));
  it("but `all` counts as `All` where there is no `All` (found by an SDK review: analytics-go's DisableAll() sends it, and those messages reached every webhook)", () => {
    expect(routesTo(track({ all: false }), "crm")).toBe(false);
    expect(routesTo(track({ all: false, Amplitude: true }), "crm")).toBe(false);
    expect(routesTo(track({ all: false, crm: true }), "crm")).toBe(true);
    expect(routesTo(track({ All: true, all: false }), "crm")).toBe(true);
  });
  it("an options object counts as on", () => expect(routesTo(track({ All: false, crm: { apiVersion: 2 } }), "crm")).toBe(true));
  it("delete notifications ignore integrations", () => expect(routesTo({ type: "delete", integrations: { All: false } }, "crm")).toBe(true));
});

describe("body and signatures", () => {
  const alias = { type: "alias", userId: "new-id", previousId: "old-id", messageId: "m1", timestamp: "2026-01-01T00:00:00.000Z" } as unknown as DeliverableMessage;

  it("adds version 1, and the literal alias keys", () => {
    expect(JSON.parse(webhookBody(alias).toString())).toMatchObject({ version: 1, type: "alias", "Previous ID": "old-id", "User ID": "new-id", previousId: "old-id" });
  });

  it("keeps version 1 even when the message has a top-level version of its own", () => {
    const message = { type: "track", version: 2, event: "e", messageId: "m" } as unknown as DeliverableMessage;
    expect(JSON.parse(webhookBody(message).toString()).version).toBe(1);
  });

  it("spliced from the stored bytes, the body is what serialising the message again gives", () => {
    const message = { type: "track", event: "Signed Up", properties: { plan: "pro", "ü": [1, null] }, messageId: "m", context: { library: { name: "x" } } };
    const stored = Buffer.from(JSON.stringify(message));
    const body = webhookBody(message as unknown as DeliverableMessage, stored);
    expect(body.toString()).toBe(JSON.stringify({ version: 1, ...message }));
    // A copy, not a view of the stored bytes: the body must not change if they do.
    stored.fill(0x20);
    expect(body.toString()).toBe(JSON.stringify({ version: 1, ...message }));
  });

  it("rebuilds rather than splices when the stored bytes would give a second version, or for alias", () => {
    const own = { type: "track", version: 2, event: "e", messageId: "m" };
    expect(webhookBody(own as unknown as DeliverableMessage, Buffer.from(JSON.stringify(own))).toString()).toBe('{"version":1,"type":"track","event":"e","messageId":"m"}');
    const body = JSON.parse(webhookBody(alias, Buffer.from(JSON.stringify(alias))).toString());
    expect(body).toMatchObject({ version: 1, "Previous ID": "old-id", "User ID": "new-id" });
  });

  it("sends delete notifications without version", () => {
    const body = JSON.parse(webhookBody({ type: "delete", userId: "u1", timestamp: "2026-01-01T00:00:00.000Z", messageId: "d1" }).toString());
    expect(body).toEqual({ type: "delete", userId: "u1", timestamp: "2026-01-01T00:00:00.000Z", messageId: "d1" });
  });

  it("X-Signature is the hex HMAC-SHA1 of the exact bytes", () => {
    const body = Buffer.from('{"a":"ü"}');
    expect(xSignature(body, "s3cret")).toBe(createHmac("sha1", "s3cret").update(body).digest("hex"));
    expect(xSignature(body, "s3cret")).toMatch(/^[0-9a-f]{40}$/);
  });

  it("X-Signature keyed by a KeyObject of the secret's UTF-8 bytes (as the worker signs) equals the string-keyed one", () => {
    const body = Buffer.from('{"a":"ü"}');
    const secret = "s3cret-ключ";
    expect(xSignature(body, createSecretKey(Buffer.from(secret, "utf8")))).toBe(createHmac("sha1", secret).update(body).digest("hex"));
  });

  it("Standard Webhooks signs id.timestamp.body with HMAC-SHA256, base64, v1 prefix", () => {
    const body = Buffer.from('{"type":"track"}');
    // Not base64 (a '-'), so its UTF-8 bytes are the key; "s3cret" would be base64 to the libraries.
    const headers = standardWebhookHeaders("msg_1", 1700000000, body, "s3cret-key");
    const expected = createHmac("sha256", "s3cret-key").update(`msg_1.1700000000.${body.toString()}`).digest("base64");
    expect(headers).toEqual({ "webhook-id": "msg_1", "webhook-timestamp": "1700000000", "webhook-signature": `v1,${expected}` });
    const key = Buffer.from("c2VjcmV0LWJ5dGVz", "base64");
    expect(standardWebhookHeaders("m", 1, body, "whsec_c2VjcmV0LWJ5dGVz")["webhook-signature"]).toBe(`v1,${createHmac("sha256", key).update(`m.1.${body.toString()}`).digest("base64")}`);
  });

  it("every header delivery sets itself is one a destination cannot set (else its custom header would replace a signature)", () => {
    const own = [SIGNATURE_HEADER, DELIVERY_ID_HEADER, ...Object.keys(standardWebhookHeaders("m", 1, Buffer.from("{}"), "s"))];
    expect(own.map((name) => name.toLowerCase()).filter((name) => !RESERVED_WEBHOOK_HEADERS.includes(name))).toEqual([]);
  });

  it("a base64 secret without the whsec_ prefix is decoded too, as the official libraries' new Webhook(secret) does", () => {
    const body = Buffer.from('{"type":"track"}');
    const key = Buffer.from("c2VjcmV0LWJ5dGVz", "base64");
    const expected = `v1,${createHmac("sha256", key).update(`m.1.${body.toString()}`).digest("base64")}`;
    expect(standardWebhookHeaders("m", 1, body, "c2VjcmV0LWJ5dGVz")["webhook-signature"]).toBe(expected);
    // Not base64 (the libraries refuse it): its UTF-8 bytes, as with their raw-key option.
    expect(standardWebhookHeaders("m", 1, body, "change-me")["webhook-signature"]).toBe(`v1,${createHmac("sha256", "change-me").update(`m.1.${body.toString()}`).digest("base64")}`);
  });

  it("the keys signingKeys() makes once per destination sign as the secret itself does, for both schemes", () => {
    const body = Buffer.from('{"a":"ü"}');
    for (const secret of ["s3cret-ключ", "whsec_c2VjcmV0LWJ5dGVz", "c2VjcmV0LWJ5dGVz"]) {
      const keys = signingKeys(secret);
      expect(xSignature(body, keys.xSignature)).toBe(xSignature(body, secret));
      expect(standardWebhookHeaders("m", 1, body, keys.standardWebhooks)).toEqual(standardWebhookHeaders("m", 1, body, secret));
    }
  });
});

describe("attempt records", () => {
  it("show URLs without credentials, query strings or more of the path than its first segment", () => {
    expect(redactUrl("https://user:pw@hooks.example.com:8443/in?token=abc")).toBe("https://hooks.example.com:8443/in?…");
    expect(redactUrl("http://hooks.example.com/a")).toBe("http://hooks.example.com/a");
    // Tokens in the path (regression: shown whole in attempt records and logs).
    expect(redactUrl("https://hooks.slack.com/services/T0001/B0002/XXXXXXXXXXXXXXXXXXXXXXXX")).toBe("https://hooks.slack.com/services/…");
    expect(redactUrl("https://discord.com/api/webhooks/123/abc-token")).toBe("https://discord.com/api/…");
    expect(redactUrl("https://hooks.example.com/")).toBe("https://hooks.example.com/");
    expect(redactUrl("https://hooks.example.com")).toBe("https://hooks.example.com/");
    // A token as the only segment (found by a review: shown whole in logs, records and a metric label).
    expect(redactUrl("https://hook.eu1.make.com/abcd1234secrettokenxyz")).toBe("https://hook.eu1.make.com/…");
    expect(redactUrl("https://webhook.site/0f6c3a5e-8a4b-4c1e-9d2f-3b7a1c9e5d40")).toBe("https://webhook.site/…");
    expect(redactUrl("https://hooks.example.com/QWErtyUIOpasDFGhjkLZXcvbnm")).toBe("https://hooks.example.com/…");
    expect(redactUrl("https://hooks.zapier.com/hooks/catch/123456/abcdef/")).toBe("https://hooks.zapier.com/hooks/…");
    expect(redactUrl("https://hooks.example.com/0123abcd9f/more")).toBe("https://hooks.example.com/…");
    expect(redactUrl("https://hooks.example.com/segment-events?token=x")).toBe("https://hooks.example.com/segment-events?…");
    expect(redactUrl("https://hooks.example.com/v1/in")).toBe("https://hooks.example.com/v1/…");
    expect(redactUrl("https://hooks.example.com/7f3a9c21e4")).toBe("https://hooks.example.com/…");
  });
});

describe("classifying an answer", () => {
  it.each([200, 201, 204, 299])("%i delivers", (status) => expect(classifyStatus(status).kind).toBe("delivered"));
  it.each([408, 429, 500, 502, 503, 504])("%i is retried", (status) => expect(classifyStatus(status).kind).toBe("retry"));
  it.each([301, 302, 307, 308, 400, 401, 403, 404, 410, 422, 600, 999])("%i fails that URL for good (redirects are not followed; 600+ was retried as a 5xx)", (status) =>
    expect(classifyStatus(status).kind).toBe("permanent"));

  it("honours Retry-After in seconds or as a date, within bounds", () => {
    const now = Date.parse("2026-01-01T00:00:00Z");
    expect(parseRetryAfter("30", now)).toBe(30_000);
    expect(parseRetryAfter("Thu, 01 Jan 2026 00:02:00 GMT", now)).toBe(120_000);
    // At least the first backoff step (regression: "1" was a 1 s pause, and a receiver answering
    // it to everything had each message sent every second for its whole retry window).
    expect(parseRetryAfter("1", now)).toBe(5_000);
    expect(RETRY_AFTER_BOUNDS_MS.min).toBe(5_000);
    expect(parseRetryAfter("86400", now)).toBe(RETRY_AFTER_BOUNDS_MS.max);
    expect(parseRetryAfter("soon", now)).toBeUndefined();
    // "Now", a past date and what RFC 9110 does not allow ask for no pause: the backoff applies.
    for (const value of ["0", "Sat, 01 Jan 2000 00:00:00 GMT", "-5", "1.5", "2026-01-01T00:05:00Z"]) expect(parseRetryAfter(value, now), value).toBeUndefined();
    expect(classifyStatus(429, "30", now)).toEqual({ kind: "retry", status: 429, retryAfterMs: 30_000 });
    // RFC 9110's obsolete date forms are read (asctime's is GMT); other text that Date.parse would
    // take is not (found by a time review: "Fri 2099" paused a URL for the 15-minute maximum).
    expect(parseRetryAfter("Thursday, 01-Jan-26 00:02:00 GMT", now)).toBe(120_000);
    expect(parseRetryAfter("Thu Jan  1 00:02:00 2026", now)).toBe(120_000);
    for (const value of ["Fri 2099", "Thu, 1 Jan 2026 00:02", "Thu Jan 01 2026 00:02:00 GMT+0000"]) expect(parseRetryAfter(value, now), value).toBeUndefined();
  });
});

describe("combining URLs", () => {
  it("one delivery is enough", () => expect(combine([{ kind: "retry", status: 500 }, { kind: "delivered", status: 200 }, { kind: "permanent", status: 404 }]).kind).toBe("delivered"));
  it("retries while any URL may still succeed", () => expect(combine([{ kind: "permanent", status: 404 }, { kind: "retry", error: "timeout" }]).kind).toBe("retry"));
  it("is permanent when no URL is left retryable", () => expect(combine([{ kind: "permanent", status: 404 }, { kind: "permanent", status: 410 }])).toEqual({ kind: "permanent", status: 404 }));
  it("the next round comes after the backoff, or when the first URL's pause ends if every URL is pausing past it", () => {
    expect(nextRoundDelayMs([60_000, 5_000], 10_000)).toBe(10_000);
    expect(nextRoundDelayMs([60_000, 30_000], 10_000)).toBe(30_000);
    expect(nextRoundDelayMs([60_000, undefined], 10_000)).toBe(10_000);
    expect(nextRoundDelayMs([60_000, undefined], 90_000)).toBe(90_000);
    expect(nextRoundDelayMs([], 10_000)).toBe(10_000);
  });

  it("a pause never shortens the backoff (found by a soak test: Retry-After: 7 on every answer had each message sent every 7 s; the breaker's 5 s pauses used up the backoff's steps in 90 s)", () => {
    expect(nextRoundDelayMs([7_000], 40_000)).toBe(40_000);
    expect(nextRoundDelayMs([5_000], 20 * 60_000)).toBe(20 * 60_000);
  });
});

describe("backoff", () => {
  it("grows exponentially from 5 s with ±20% jitter, capped at 30 min", () => {
    expect(backoffMs(1, Infinity, () => 0.5)).toBe(5_000);
    expect(backoffMs(2, Infinity, () => 0.5)).toBe(10_000);
    expect(backoffMs(1, Infinity, () => 0)).toBe(4_000);
    expect(backoffMs(1, Infinity, () => 1)).toBe(6_000);
    expect(backoffMs(20, Infinity, () => 0.5)).toBe(30 * 60_000);
  });
  it("never waits past the end of the retry window", () => expect(backoffMs(10, 1_234, () => 0.5)).toBe(1_234));
  it("waits no longer than twice what the message has waited so far, at least 5 s (found by a review: rounds held back by a pause count as attempts on other replicas)", () => {
    expect(backoffMs(11, Infinity, () => 0.5, 90_000)).toBe(180_000); // not 30 minutes
    expect(backoffMs(11, Infinity, () => 0.5, 1_000)).toBe(5_000);
    expect(backoffMs(2, Infinity, () => 0.5, 3_600_000)).toBe(10_000); // a backlog's first retries keep the usual steps
    // The usual schedule is within the bound: step k comes after 5·(2^(k-1)-1) s.
    for (let k = 2; k <= 9; k++) expect(backoffMs(k, Infinity, () => 0.5, 5_000 * (2 ** (k - 1) - 1))).toBe(5_000 * 2 ** (k - 1));
  });
});

describe("delivery metrics", () => {
  it("one scrape reads the backlog from JetStream once for its six gauges", async () => {
    const metrics = new DeliveryMetrics({ defaultMetrics: false });
    let reads = 0;
    metrics.readBacklogFrom(async () => {
      reads++;
      return {
        destinations: [
          { destination: "shop/crm", pending: 3, inFlight: 2, deadLetters: 1, oldestAgeSeconds: 12.5 },
          // NATS could not tell its oldest message: no figure rather than a wrong one.
          { destination: "shop/erp", pending: 1, inFlight: 0, deadLetters: 0, oldestAgeSeconds: undefined },
        ],
        deadLetterStream: { bytes: 900, maxBytes: 1000 },
        attemptsStream: { bytes: 400, maxBytes: 2000 },
      };
    });
    const text = await metrics.registry.metrics();
    expect(reads).toBe(1);
    expect(text).toContain('trackhook_delivery_oldest_message_age_seconds{destination="shop/crm"} 12.5');
    expect(text).not.toContain('trackhook_delivery_oldest_message_age_seconds{destination="shop/erp"}');
    expect(text).toContain('trackhook_delivery_consumer_pending_messages{destination="shop/erp"} 1');
    expect(text).toContain('trackhook_delivery_consumer_pending_messages{destination="shop/crm"} 3');
    expect(text).toContain('trackhook_delivery_in_flight_messages{destination="shop/crm"} 2');
    expect(text).toContain('trackhook_delivery_dead_letters{destination="shop/crm"} 1');
    expect(text).toContain('trackhook_dead_letter_stream_bytes{stream="TRACKHOOK_DLQ"} 900');
    expect(text).toContain('trackhook_dead_letter_stream_max_bytes{stream="TRACKHOOK_DLQ"} 1000');
    expect(text).toContain('trackhook_attempts_stream_bytes{stream="TRACKHOOK_ATTEMPTS"} 400');
    expect(text).toContain('trackhook_attempts_stream_max_bytes{stream="TRACKHOOK_ATTEMPTS"} 2000');
    await metrics.registry.metrics();
    expect(reads, "the next scrape reads again").toBe(2);
  });

  it("has no stream series, rather than a 0 that reads as an empty stream, when JetStream could not be read (found by a review)", async () => {
    const metrics = new DeliveryMetrics({ defaultMetrics: false });
    metrics.readBacklogFrom(async () => {
      throw new Error("timeout");
    });
    const text = await metrics.registry.metrics();
    expect(text).toContain("# TYPE trackhook_dead_letter_stream_bytes gauge");
    expect(text).not.toMatch(/^trackhook_dead_letter_stream_bytes/m);
    expect(text).not.toMatch(/^trackhook_delivery_consumer_pending_messages/m);
  });
});

describe("pulling ahead of the delivery slots", () => {
  it("pulls about twice a destination's fair share of the process's slots, 16 to 256 (found by a review: 300 destinations pulling 100 each behind 1,000 slots waited past ack_wait, and ~20% of messages arrived twice)", () => {
    expect(pullAhead(1000, 1, 1)).toBe(256);
    expect(pullAhead(1000, 1, 20)).toBe(100);
    expect(pullAhead(1000, 1, 300)).toBe(16);
    expect(pullAhead(1000, 1, 0)).toBe(256);
    // Tenants first: a tenant's one destination beside another's 100 pulls ahead as a tenant's half.
    expect(pullAhead(1000, 2, 1)).toBe(256);
    expect(pullAhead(1000, 2, 100)).toBe(16);
    expect(pullAhead(1000, 4, 5)).toBe(100);
    // The whole process's buffer stays a small multiple of its slots.
    for (const n of [1, 10, 50, 125, 300]) expect(Math.min(100, pullAhead(1000, 1, n)) * n).toBeLessThanOrEqual(Math.max(2 * 1000 + n, 16 * n));
  });
});

describe("a destination's config change, for its running worker", () => {
  const running: CompiledDestination = {
    namespace: "default", name: "hook", enabled: true, sources: ["web"], urls: ["https://a.example/h"], headers: [],
    timeoutMs: 5_000, retryWindowMs: 14_400_000, maxInFlight: 100, standardWebhooks: false, createdAt: "2026-11-01T00:00:00Z",
  };
  it("secret, headers and signing scheme apply live; createdAt alone is no change; anything else restarts the worker", () => {
    expect(changeOf({ ...running }, running)).toBe("none");
    expect(changeOf({ ...running, createdAt: "2026-11-02T00:00:00Z" }, running)).toBe("none");
    expect(changeOf({ ...running, sharedSecret: "s" }, running)).toBe("live");
    expect(changeOf({ ...running, headers: [{ name: "User-Agent", value: "x" }] }, running)).toBe("live");
    expect(changeOf({ ...running, standardWebhooks: true }, running)).toBe("live");
    expect(changeOf({ ...running, additionalSharedSecrets: ["old"] }, running)).toBe("live");
    expect(changeOf({ ...running, sharedSecret: "s", urls: ["https://b.example/h"] }, running)).toBe("restart");
    expect(changeOf({ ...running, timeoutMs: 1_000 }, running)).toBe("restart");
    expect(changeOf({ ...running, sources: ["web", "app"] }, running)).toBe("restart");
  });
});
