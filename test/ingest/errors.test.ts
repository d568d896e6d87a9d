// The spec's Errors table, one test per row, plus the other messages that are answered 200 but
// not accepted. "Not accepted" is proven three ways: 200 answer, nothing in the stream, and the
// reason counted in metrics.
import { describe, expect, it } from "vitest";
import { WRITE_KEY, basic, messagesCounted, post, storedMessages, uniqueId, useIngest } from "../harness/ingest.ts";

const env = useIngest();

const auth = { authorization: basic(WRITE_KEY) };
const send = (path: string, body: unknown) => post(`${env.ingest.url}${path}`, body, { headers: auth });
async function isStored(messageId: string): Promise<boolean> {
  return (await storedMessages(env.nats)).some((m) => m.body.messageId === messageId);
}

describe("spec Errors table", () => {
  it("body that is not valid JSON -> 400 invalid_json", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: auth, raw: '{"userId": "u1", "event": ' });
    expect(res).toMatchObject({ status: 400, json: { success: false, code: "invalid_json", message: expect.any(String) } });
  });

  it("single-message request over 32KB -> 400 request_too_large", async () => {
    const res = await send("/v1/track", { userId: "u1", event: "big", properties: { pad: "x".repeat(33 * 1024) } });
    expect(res).toMatchObject({ status: 400, json: { success: false, code: "request_too_large" } });
  });

  it("batch request over 500KB -> 400 batch_too_large", async () => {
    const batch = Array.from({ length: 20 }, (_, i) => ({ type: "track", userId: "u1", event: "e", properties: { pad: "x".repeat(26 * 1024), i } }));
    const res = await send("/v1/batch", { batch });
    expect(res).toMatchObject({ status: 400, json: { success: false, code: "batch_too_large" } });
  });

  it("single event inside a batch over 32KB -> 400 batch_item_too_large, nothing of the batch stored", async () => {
    const small = uniqueId("small");
    const batch = [
      { type: "track", userId: "u1", event: "ok", messageId: small },
      { type: "track", userId: "u1", event: "big", properties: { pad: "x".repeat(33 * 1024) } },
    ];
    const res = await send("/v1/batch", { batch });
    expect(res).toMatchObject({ status: 400, json: { success: false, code: "batch_item_too_large" } });
    expect(res.json.message).toContain("item 1");
    expect(await isStored(small)).toBe(false);
  });

  it("neither userId nor anonymousId -> 200, not accepted (no_user_anon_id)", async () => {
    const id = uniqueId();
    const before = await messagesCounted(env.ingest, { reason: "no_user_anon_id" });
    const res = await send("/v1/track", { event: "Anonymous?", messageId: id });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await isStored(id)).toBe(false);
    expect(await messagesCounted(env.ingest, { reason: "no_user_anon_id" })).toBe(before + 1);
  });

  it("track without event -> 200, not accepted (missing_event)", async () => {
    const id = uniqueId();
    const before = await messagesCounted(env.ingest, { reason: "missing_event" });
    const res = await send("/v1/track", { userId: "u1", messageId: id });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
    expect(await isStored(id)).toBe(false);
    expect(await messagesCounted(env.ingest, { reason: "missing_event" })).toBe(before + 1);
  });

  it("messageId already seen -> 200, stored once (duplicate_message_id)", async () => {
    const id = uniqueId("dup");
    const before = await messagesCounted(env.ingest, { reason: "duplicate_message_id" });
    const first = await send("/v1/track", { userId: "u1", event: "Once", messageId: id });
    const second = await send("/v1/track", { userId: "u1", event: "Once", messageId: id });
    expect([first.status, second.status]).toEqual([200, 200]);
    expect((await storedMessages(env.nats)).filter((m) => m.body.messageId === id)).toHaveLength(1);
    expect(await messagesCounted(env.ingest, { reason: "duplicate_message_id" })).toBe(before + 1);
  });
});

describe("other messages answered 200 but not accepted", () => {
  const cases: Array<[string, string, Record<string, unknown>]> = [
    ["alias without previousId", "missing_previous_id", { type: "alias", userId: "u2" }],
    ["alias without userId", "missing_user_id", { type: "alias", previousId: "anon-1" }],
    ["group without groupId", "missing_group_id", { type: "group", userId: "u1", traits: { name: "Acme" } }],
    ["an unknown type", "unknown_type", { type: "purchase", userId: "u1" }],
    ["a batch item with no type", "unknown_type", { userId: "u1", event: "e" }],
    ["a batch item that is not an object", "invalid_message", "just a string" as unknown as Record<string, unknown>],
    ["a field of the wrong type", "invalid_field", { type: "track", userId: "u1", event: "e", properties: ["not", "an", "object"] }],
    ["a messageId over 100 characters", "invalid_field", { type: "track", userId: "u1", event: "e", messageId: "m".repeat(101) }],
    // Found by a fidelity review: stored, and never delivered (no header can carry it).
    ["a messageId with a lone surrogate", "invalid_field", { type: "track", userId: "u1", event: "e", messageId: "lone-\ud800-x" }],
  ];
  for (const [what, reason, item] of cases) {
    it(`${what} -> ${reason}, and the good items of the same batch are stored`, async () => {
      const good = uniqueId("good");
      const before = await messagesCounted(env.ingest, { reason });
      const res = await send("/v1/batch", { batch: [item, { type: "identify", userId: "u1", messageId: good }] });
      expect(res).toMatchObject({ status: 200, json: { success: true } });
      expect(await messagesCounted(env.ingest, { reason })).toBe(before + 1);
      expect(await isStored(good)).toBe(true);
    });
  }

  it("null userId with an anonymousId is accepted (analytics-python sends null for anonymous users)", async () => {
    const id = uniqueId();
    const res = await send("/v1/track", { userId: null, anonymousId: "anon-9", event: "e", messageId: id });
    expect(res.status).toBe(200);
    const stored = (await storedMessages(env.nats)).find((m) => m.body.messageId === id);
    expect(stored?.body).toMatchObject({ anonymousId: "anon-9" });
    expect(stored?.body).not.toHaveProperty("userId");
  });
});

describe("other answers", () => {
  it("a JSON body that is not an object -> 400 invalid_body", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, [1, 2], { headers: auth });
    expect(res).toMatchObject({ status: 400, json: { code: "invalid_body" } });
  });

  it("a batch body without a batch array -> 400 invalid_body", async () => {
    const res = await send("/v1/batch", { batch: { type: "track" } });
    expect(res).toMatchObject({ status: 400, json: { code: "invalid_body" } });
  });

  it("an empty body -> 400 invalid_json", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: auth, raw: "" });
    expect(res).toMatchObject({ status: 400, json: { code: "invalid_json" } });
  });

  it("an unknown path -> 404 JSON", async () => {
    const res = await send("/v1/purchase", { userId: "u1" });
    expect(res).toMatchObject({ status: 404, json: { success: false, code: "not_found" } });
  });

  it("GET or PUT of a message path -> 405 method_not_allowed with Allow: POST (it was a 404, as if the path were unknown)", async () => {
    // Paths as the router reads them: it ignores doubled and trailing slashes.
    for (const [method, path, routed] of [["GET", "/v1/track", "/v1/track"], ["GET", "/v1/batch?x=1", "/v1/batch"], ["PUT", "/v1/t", "/v1/t"], ["DELETE", "/v1/import", "/v1/import"], ["GET", "/v1/track/", "/v1/track"], ["GET", "//v1//batch", "/v1/batch"]] as const) {
      const res = await fetch(`${env.ingest.url}${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.headers.get("allow")).toBe("POST, OPTIONS");
      expect(res.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
      expect(await res.json()).toMatchObject({ success: false, code: "method_not_allowed", message: `${routed} takes POST, not ${method}` });
    }
    expect((await send("/v1/track/", { userId: "u1", event: "Slash" })).status).toBe(200);
    const unknown = await fetch(`${env.ingest.url}/v1/nothing`, { headers: { "x-request-id": "trace-404" } });
    expect(unknown.status).toBe(404);
    // Every error answer names its request (a docs audit found 404 and 405 did not).
    expect(unknown.headers.get("x-request-id")).toBe("trace-404");
    const metric = await env.ingest.metrics.requests.get();
    expect(metric.values.find((v) => v.labels.code === "method_not_allowed" && v.labels.route === "/v1/track")?.labels.status).toBe("405");
  });

  it("counts every answer in trackhook_ingest_requests_total by route, status and code", async () => {
    await post(`${env.ingest.url}/v1/track`, undefined, { headers: auth, raw: "{" });
    await send("/v1/track", { userId: "u1", event: "Counted" });
    await send("/v1/nowhere", { userId: "u1" });
    const metric = await env.ingest.metrics.requests.get();
    const find = (code: string) => metric.values.find((v) => v.labels.code === code);
    expect(find("invalid_json")?.labels).toMatchObject({ route: "/v1/track", status: "400" });
    expect(find("ok")?.value).toBeGreaterThan(0);
    expect(find("not_found")?.labels).toMatchObject({ route: "unmatched", status: "404" });
  });

  it("counts a CORS preflight under its route, and a request to no route that fails on its body as unmatched", async () => {
    const preflight = await fetch(`${env.ingest.url}/v1/track`, { method: "OPTIONS", headers: { origin: "https://shop.example", "access-control-request-method": "POST" } });
    expect(preflight.status).toBe(204);
    const badType = await post(`${env.ingest.url}/v1/nowhere`, { userId: "u1" }, { headers: { "content-type": "json" } });
    expect(badType.status).toBe(400);
    const metric = await env.ingest.metrics.requests.get();
    expect(metric.values.find((v) => v.labels.route === "/v1/*" && v.labels.status === "204")?.value).toBeGreaterThan(0);
    expect(metric.values.find((v) => v.labels.route === "unmatched" && v.labels.status === "400")).toBeDefined();
  });

  it("a large body sent to a route that takes none is read only up to the single-message limit", async () => {
    const res = await post(`${env.ingest.url}/v1/nowhere`, undefined, { headers: auth, raw: JSON.stringify({ pad: "x".repeat(40 * 1024) }) });
    expect(res).toMatchObject({ status: 400, json: { code: "request_too_large" } });
  });
});
