// Graceful shutdown: closing the ingest stops new requests but lets a request whose publish is
// in flight finish with its 200 and its message stored. nats-server is frozen with SIGSTOP so the
// publish is reliably in flight when close() starts.
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freeze, thaw } from "../harness/freeze.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";
import { WRITE_KEY, basic, post, startIngest, storedMessages, uniqueId, type IngestHarness } from "../harness/ingest.ts";

let nats: NatsHarness;
let ingest: IngestHarness;
beforeAll(async () => {
  nats = await startNats();
  ingest = await startIngest(nats);
});
afterAll(async () => {
  thaw(nats.server.pid!);
  await nats?.stop();
});

describe("graceful shutdown", () => {
  it("finishes in-flight publishes before closing, and refuses new requests meanwhile", async () => {
    const id = uniqueId("in-flight");
    await freeze(nats.server.pid!);
    const inFlight = post(`${ingest.url}/v1/track`, { userId: "u", event: "Late", messageId: id }, { headers: { authorization: basic(WRITE_KEY) } });
    await new Promise((r) => setTimeout(r, 200)); // the request is now waiting for its PubAck

    let closed = false;
    const closing = ingest.close().then(() => (closed = true));
    await new Promise((r) => setTimeout(r, 200));
    expect(closed).toBe(false); // close() waits for the in-flight request
    const late = await post(`${ingest.url}/v1/track`, { userId: "u", event: "Too late" }, { headers: { authorization: basic(WRITE_KEY) } }).catch((err: Error) => err);
    expect(late instanceof Error || late.status === 503).toBe(true);

    thaw(nats.server.pid!);
    expect(await inFlight).toMatchObject({ status: 200, json: { success: true } });
    await closing; // and close() completes: the connection did not hold the server open
    expect((await storedMessages(nats)).filter((m) => m.body.messageId === id)).toHaveLength(1);
  });

  it("answers a request completed after closing began with 503 shutting_down, Retry-After and CORS headers (regression: Fastify's own 503 had neither)", async () => {
    const other = await startIngest(nats, { ingest: { corsOrigins: ["https://shop.example"] } });
    const { port } = new URL(other.url);
    const socket = connect(Number(port), "127.0.0.1");
    let answer = "";
    socket.on("data", (chunk) => (answer += chunk.toString()));
    const ended = new Promise((resolve) => socket.on("close", resolve));
    // Half a request: the connection is not idle, so closing does not drop it.
    socket.write("POST /v1/track HTTP/1.1\r\nHost: localhost\r\nOrigin: https://shop.example\r\n");
    await new Promise((r) => setTimeout(r, 100));
    const closing = other.close();
    await new Promise((r) => setTimeout(r, 200));
    const body = JSON.stringify({ userId: "u", event: "During shutdown" });
    socket.write(`Authorization: ${basic(WRITE_KEY)}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await ended;
    await closing;
    expect(answer).toMatch(/^HTTP\/1\.1 503 /);
    expect(answer).toMatch(/\r\nretry-after: \d+\r\n/i);
    expect(answer).toMatch(/\r\nconnection: close\r\n/i);
    expect(answer).toMatch(/\r\naccess-control-allow-origin: https:\/\/shop\.example\r\n/i);
    expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4))).toMatchObject({ success: false, code: "shutting_down" });
  });
});
