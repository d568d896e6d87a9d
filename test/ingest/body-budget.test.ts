// The bytes of request bodies one ingest holds at once are bounded, all requests together: beyond,
// a request still arriving gets 503 `overloaded` with Retry-After, and nothing already accepted
// is lost (found by a sizing review: 256 large batches at once took an ingest out of heap).
import { request, type ClientRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WRITE_KEY, basic, post, startIngest, storedMessages, uniqueId, type IngestHarness } from "../harness/ingest.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";

const KB = 1024;
let nats: NatsHarness;
let ingest: IngestHarness;
beforeAll(async () => {
  nats = await startNats();
  ingest = await startIngest(nats, { ingest: { bodyBytesInFlight: 256 * KB } });
});
afterAll(async () => {
  await ingest?.close();
  await nats?.stop();
});

/** A batch of `items` tracks of ~10KB each, and their messageIds. */
function batch(items: number): { body: string; ids: string[] } {
  const ids = Array.from({ length: items }, () => uniqueId());
  const body = JSON.stringify({ batch: ids.map((messageId) => ({ type: "track", userId: "u", event: "Big", messageId, properties: { pad: "x".repeat(10 * KB) } })) });
  return { body, ids };
}

/** A request whose body is sent only in part, until `finish()`: what the ingest holds meanwhile. */
function held(body: string, partBytes: number): { finish(): Promise<number> } {
  let req!: ClientRequest;
  const answered = new Promise<number>((resolve, reject) => {
    req = request(`${ingest.url}/v1/batch`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), authorization: basic(WRITE_KEY) },
    }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", reject);
  });
  req.write(body.slice(0, partBytes));
  return {
    finish: () => {
      req.end(body.slice(partBytes));
      return answered;
    },
  };
}

const stored = async (ids: string[]) => {
  const all = new Set((await storedMessages(nats)).map((m) => m.body.messageId));
  return ids.filter((id) => all.has(id)).length;
};

describe("request bodies held at once", () => {
  it("beyond the budget, a batch still arriving gets 503 overloaded with Retry-After; a single message still gets in, and the held batch and the retried one are stored", async () => {
    const first = batch(20); // ~200KB
    const holding = held(first.body, 190 * KB);
    await new Promise((r) => setTimeout(r, 300)); // read by the ingest, held
    const second = batch(20);
    const refused = await post(`${ingest.url}/v1/batch`, undefined, { raw: second.body, headers: { authorization: basic(WRITE_KEY) } });
    expect(refused).toMatchObject({ status: 503, json: { success: false, code: "overloaded" } });
    expect(refused.headers.get("retry-after")).toBe("1");
    // A single message is never refused for others' batches.
    const single = { userId: "u", event: "Small", messageId: uniqueId() };
    expect((await post(`${ingest.url}/v1/track`, single, { headers: { authorization: basic(WRITE_KEY) } })).status).toBe(200);

    expect(await holding.finish()).toBe(200);
    // Room again: the SDK's retry is stored.
    expect((await post(`${ingest.url}/v1/batch`, undefined, { raw: second.body, headers: { authorization: basic(WRITE_KEY) } })).status).toBe(200);
    expect(await stored([...first.ids, ...second.ids, single.messageId])).toBe(41);
    const counted = (await ingest.metrics.registry.getSingleMetricAsString("trackhook_ingest_requests_total")).split("\n").find((l) => l.includes('code="overloaded"'));
    expect(counted).toMatch(/ 1$/);
  });

  it("gives back what a refused or failed request held (no budget leaks)", async () => {
    for (let i = 0; i < 5; i++) {
      const noEvent = { batch: Array.from({ length: 15 }, () => ({ type: "track", userId: "u", properties: { pad: "x".repeat(10 * KB) } })) };
      expect((await post(`${ingest.url}/v1/batch`, noEvent, { headers: { authorization: basic(WRITE_KEY) } })).status).toBe(200); // not accepted, nothing stored
      expect((await post(`${ingest.url}/v1/batch`, undefined, { raw: "{".repeat(150 * KB), headers: { authorization: basic(WRITE_KEY) } })).status).toBe(400);
    }
    const big = batch(24); // ~240KB: fits only if every earlier request gave its share back
    expect((await post(`${ingest.url}/v1/batch`, undefined, { raw: big.body, headers: { authorization: basic(WRITE_KEY) } })).status).toBe(200);
  });
});
