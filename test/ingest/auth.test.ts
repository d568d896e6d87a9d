// Authentication: Basic with the write key as username (with or without colon), or writeKey in
// the body; missing, unknown or disabled keys get 401 with a JSON error.
import { describe, expect, it } from "vitest";
import { OTHER_WRITE_KEY, WRITE_KEY, basic, post, storedMessages, useIngest } from "../harness/ingest.ts";

const env = useIngest();

const track = (messageId: string) => ({ userId: "u1", event: "Auth Test", messageId });

describe("auth", () => {
  it("accepts Basic auth with the write key and a trailing colon", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, track("basic-colon"), { headers: { authorization: basic(WRITE_KEY) } });
    expect(res).toMatchObject({ status: 200, json: { success: true } });
  });

  it("accepts Basic auth with the write key and no colon", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, track("basic-no-colon"), { headers: { authorization: basic(WRITE_KEY, false) } });
    expect(res.status).toBe(200);
  });

  it("accepts writeKey in the body of a single message", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, { ...track("body-key"), writeKey: WRITE_KEY });
    expect(res.status).toBe(200);
  });

  it("accepts writeKey at the top level of a batch", async () => {
    const res = await post(`${env.ingest.url}/v1/batch`, { writeKey: OTHER_WRITE_KEY, batch: [{ type: "track", ...track("batch-body-key") }] });
    expect(res.status).toBe(200);
  });

  it("answers 401 missing_write_key without any key", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, track("no-key"));
    expect(res).toMatchObject({ status: 401, json: { success: false, code: "missing_write_key" } });
  });

  it("answers 401 invalid_write_key for an unknown key", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, track("bad-key"), { headers: { authorization: basic("nope") } });
    expect(res).toMatchObject({ status: 401, json: { success: false, code: "invalid_write_key" } });
  });

  it("treats a disabled source's key as unknown", async () => {
    const res = await post(`${env.ingest.url}/v1/track`, track("disabled"), { headers: { authorization: basic("disabled-key") } });
    expect(res).toMatchObject({ status: 401, json: { code: "invalid_write_key" } });
  });

  it("stores messages under the authenticated source, without the write key", async () => {
    const stored = await storedMessages(env.nats);
    const byId = new Map(stored.map((m) => [m.body.messageId, m]));
    for (const id of ["basic-colon", "basic-no-colon", "body-key"]) expect(byId.get(id)?.subject).toBe("trackhook.events.default.web.track");
    expect(byId.get("batch-body-key")?.subject).toBe("trackhook.events.default.app.track");
    expect(byId.get("batch-body-key")?.msgId).toBe("default/app/batch-body-key");
    expect(byId.has("no-key") || byId.has("bad-key") || byId.has("disabled")).toBe(false);
    expect(JSON.stringify(stored)).not.toContain(WRITE_KEY);
  });
});
