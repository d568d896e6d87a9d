// Lines said per message or per refused request are let through once per 10 s per kind, with the
// count held back: a browser's write key is public, and one batch of 2,500 messages that are not
// accepted was 2,500 lines (found by a review).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildIngestApp } from "../../dataplane/ingest/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { ensureStream, eventsStreamConfig } from "../../dataplane/nats/mod.ts";
import { DEFAULT_STREAM, OTHER_WRITE_KEY, TEST_CONFIG, WRITE_KEY, basic, configFromYaml, post } from "../harness/ingest.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";

let nats: NatsHarness;
let app: Awaited<ReturnType<typeof buildIngestApp>>;
let url: string;
const lines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  nats = await startNats();
  await ensureStream(nats.jsm, eventsStreamConfig(DEFAULT_STREAM));
  const logger = createLogger({ level: "info", destination: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) } });
  app = await buildIngestApp({ nc: await nats.connect(), config: configFromYaml(TEST_CONFIG), logger });
  url = await app.listen({ host: "127.0.0.1", port: 0 });
});
afterAll(async () => {
  await app?.close();
  await nats?.stop();
});

const linesSaying = (msg: string) => lines.filter((l) => l.msg === msg);

describe("the log under a flood of bad input", () => {
  it("has one line per source and reason for a batch of 2,500 messages that are not accepted, then holds the rest back and counts them", async () => {
    const batch = (n: number) => ({ batch: Array.from({ length: n }, (_, i) => ({ type: "track", userId: "u", messageId: `no-event-${n}-${i}` })) });
    expect((await post(`${url}/v1/batch`, batch(2500), { headers: { authorization: basic(WRITE_KEY) } })).status).toBe(200);
    expect(linesSaying("message not accepted")).toEqual([
      expect.objectContaining({ reason: "missing_event", source: "default/web", moreLikeThisSinceLastLine: 0, messageId: "no-event-2500-0" }),
    ]);
    // Another reason, and another source, each have their own line.
    expect((await post(`${url}/v1/identify`, { traits: {} }, { headers: { authorization: basic(WRITE_KEY) } })).status).toBe(200);
    expect((await post(`${url}/v1/track`, { userId: "u" }, { headers: { authorization: basic(OTHER_WRITE_KEY) } })).status).toBe(200);
    expect(linesSaying("message not accepted").map((l) => `${l.source as string} ${l.reason as string}`)).toEqual([
      "default/web missing_event", "default/web no_user_anon_id", "default/app missing_event",
    ]);
    // Every one is counted all the same.
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('trackhook_ingest_messages_total{source="default/web",outcome="not_accepted",reason="missing_event"} 2500');
  });

  it("has one line for many requests refused alike (an unknown write key)", async () => {
    for (let i = 0; i < 50; i++) expect((await post(`${url}/v1/track`, { userId: "u", event: "e" }, { headers: { authorization: basic(`guess-${i}`) } })).status).toBe(401);
    const refused = lines.filter((l) => l.code === "invalid_write_key");
    expect(refused).toHaveLength(1);
    // With the client's address, to find the SDK sending it (found by a VM install review).
    expect(refused[0]).toMatchObject({ moreLikeThisSinceLastLine: 0, route: "/v1/track", ip: expect.stringMatching(/^(127\.0\.0\.1|::1|::ffff:127\.0\.0\.1)$/) });
  });

  it("gives a refused request's address as context.ip has it (found by a proxy review: an IPv4 client of ingest's dual-stack listener was logged as ::ffff:198.51.100.4)", async () => {
    const res = await app.inject({ method: "POST", url: "/v1/track", remoteAddress: "::ffff:198.51.100.4", headers: { "content-type": "application/json" }, payload: { userId: "u", event: "e" } });
    expect(res.statusCode).toBe(401);
    expect(lines.filter((l) => l.code === "missing_write_key")).toEqual([expect.objectContaining({ route: "/v1/track", ip: "198.51.100.4" })]);
  });

  it("names a refused request by the caller's X-Request-Id, or a UUID, in the log and in the answer (found by a review: req-1 style ids repeated across pods, and the client never saw them)", async () => {
    const bad = (headers: Record<string, string>) =>
      fetch(`${url}/v1/batch`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: "{not json" });
    const given = await bad({ "x-request-id": "edge-7f3a:42" });
    expect(given.status).toBe(400);
    expect(given.headers.get("x-request-id")).toBe("edge-7f3a:42");
    expect(lines.find((l) => l.code === "invalid_json")).toMatchObject({ reqId: "edge-7f3a:42" });
    const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
    expect((await bad({})).headers.get("x-request-id")).toMatch(UUID);
    // Not taken as given: too long, or not printable.
    expect((await bad({ "x-request-id": "x".repeat(200) })).headers.get("x-request-id")).toMatch(UUID);
    expect((await bad({ "x-request-id": "a b" })).headers.get("x-request-id")).toMatch(UUID);
  });
});
