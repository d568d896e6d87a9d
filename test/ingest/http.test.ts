// The ingest at the HTTP level, below the Tracking API: clients that stall, upload too much while
// the answer is already on its way, send headers Node refuses or ones Fastify would. Each case
// came from a review that found it answered in another shape, not counted, or not answered at all.
import { execFile } from "node:child_process";
import { connect, type Socket } from "node:net";
import { promisify } from "node:util";
import { deflateRawSync, deflateSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { DRAIN_LIMIT_BYTES } from "../../dataplane/ingest/body.ts";
import { WRITE_KEY, basic, post, postChunked, storedMessages, uniqueId, useIngest } from "../harness/ingest.ts";

const execFileAsync = promisify(execFile);

const env = useIngest({ ingest: { requestTimeoutMs: 1000 } });

const auth = { authorization: basic(WRITE_KEY) };

interface RawExchange {
  /** Everything the server sent before it closed the connection. */
  text: string;
  status: number | undefined;
  json: Record<string, unknown> | undefined;
  closedAfterMs: number;
}

/** Sends raw bytes and collects what comes back until the server closes the connection (or `waitMs`). */
function rawExchange(bytes: string | Buffer, waitMs = 10_000): Promise<RawExchange> {
  const url = new URL(env.ingest.url);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    let text = "";
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`connection still open after ${waitMs} ms; got ${JSON.stringify(text)}`));
    }, waitMs);
    socket.on("data", (chunk) => (text += chunk.toString()));
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      // The first answer only (its Content-Length); `text` keeps everything, a second answer too.
      const [head, ...rest] = text.split("\r\n\r\n");
      const length = Number(/content-length: (\d+)/i.exec(head ?? "")?.[1] ?? 0);
      const body = rest.join("\r\n\r\n").slice(0, length);
      resolve({
        text,
        status: head ? Number(head.split(" ")[1]) : undefined,
        json: body ? (JSON.parse(body) as Record<string, unknown>) : undefined,
        closedAfterMs: performance.now() - started,
      });
    });
    socket.write(bytes);
  });
}

const requestHead = (path: string, headers: Record<string, string>) =>
  `POST ${path} HTTP/1.1\r\nHost: ingest\r\n${Object.entries({ authorization: auth.authorization, ...headers }).map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n`;

async function countedRequests(code: string): Promise<number> {
  const values = (await env.ingest.metrics.requests.get()).values;
  return values.filter((v) => v.labels.code === code).reduce((total, v) => total + v.value, 0);
}

describe("clients Node answers before Fastify sees the request: the catalogue's shape, counted", () => {
  it("a body that stalls halfway is answered 408 request_timeout and closed (regression: held open for ever)", async () => {
    const abortedBefore = await countedRequests("client_aborted");
    const res = await rawExchange(requestHead("/v1/track", { "content-type": "application/json", "content-length": "100" }) + '{"userId":');
    expect(res.status).toBe(408);
    expect(res.json).toMatchObject({ success: false, code: "request_timeout" });
    // requestTimeoutMs is 1 s here; Node checks it every quarter of that.
    expect(res.closedAfterMs).toBeGreaterThan(900);
    expect(res.closedAfterMs).toBeLessThan(3000);
    expect(await countedRequests("request_timeout")).toBe(1);
    // The request it cut off is not counted a second time, as a client that went away.
    expect(await countedRequests("client_aborted")).toBe(abortedBefore);
  });

  it("headers over Node's limit get 431 headers_too_large", async () => {
    const res = await rawExchange(requestHead("/v1/t", { origin: "https://shop.example", cookie: "c=" + "x".repeat(20_000), "content-length": "2" }) + "{}");
    expect(res.status).toBe(431);
    expect(res.json).toMatchObject({ success: false, code: "headers_too_large" });
    expect(await countedRequests("headers_too_large")).toBe(1);
  });

  it("bytes that are not HTTP get 400 malformed_request", async () => {
    const res = await rawExchange("GARBAGE\r\n\r\n");
    expect(res.status).toBe(400);
    expect(res.json).toMatchObject({ success: false, code: "malformed_request" });
    expect(await countedRequests("malformed_request")).toBe(1);
  });
});

describe("answered requests whose body stalls", () => {
  it("an over-size body that stalls while being drained gets its 400 only, not a 408 after it (regression: two answers, counted twice)", async () => {
    const timeoutsBefore = await countedRequests("request_timeout");
    const res = await rawExchange(requestHead("/v1/track", { "content-length": "100000" }) + "x".repeat(40 * 1024));
    expect(res.text.match(/HTTP\/1\.1 /g)).toHaveLength(1);
    expect(res.status).toBe(400);
    expect(await countedRequests("request_timeout")).toBe(timeoutsBefore);
  });

  it("a corrupt gzip body still arriving gets its 400 with Connection: close, and the connection ends then, not at the request timeout", async () => {
    const timeoutsBefore = await countedRequests("request_timeout");
    const res = await rawExchange(requestHead("/v1/track", { "content-encoding": "gzip", "content-length": "20000" }) + "not gzip at all".repeat(100));
    expect(res.status).toBe(400);
    expect(res.text).toMatch(/connection: close/i);
    expect(res.json).toMatchObject({ code: "invalid_compression" });
    expect(res.closedAfterMs).toBeLessThan(900);
    expect(await countedRequests("request_timeout")).toBe(timeoutsBefore);
  });
});

describe("over-size uploads still in flight when the 400 is sent", () => {
  it("a 5MB batch sent by fetch with its Content-Length gets the 400 every time, never a reset (regression: EPIPE in 3 to 8 of 20)", async () => {
    // From another process: in this one, the client's writes and the server's close would take
    // turns on one event loop and the race would never show.
    const client = `
      const body = JSON.stringify({ batch: [{ type: "track", userId: "u", event: "e", properties: { pad: "x".repeat(5 * 1024 * 1024) } }] });
      const answers = {};
      for (let i = 0; i < 20; i++) {
        const answer = await fetch(process.argv[1], { method: "POST", headers: { authorization: process.argv[2] }, body }).then(
          async (res) => res.status + " " + (await res.json()).code,
          (err) => err.cause?.code ?? err.message,
        );
        answers[answer] = (answers[answer] ?? 0) + 1;
      }
      console.log(JSON.stringify(answers));`;
    const { stdout } = await execFileAsync(process.execPath, ["--input-type=module", "-e", client, `${env.ingest.url}/v1/batch`, auth.authorization]);
    expect(JSON.parse(stdout)).toEqual({ "400 batch_too_large": 20 });
  });

  it("the connection stays usable after an over-size body that was read to its end", async () => {
    const url = new URL(env.ingest.url);
    const socket = connect(Number(url.port), url.hostname);
    const big = JSON.stringify({ userId: "u", event: "Big", properties: { pad: "x".repeat(100 * 1024) } });
    const small = JSON.stringify({ userId: "u", event: "After", messageId: uniqueId() });
    const replies = await new Promise<string>((resolve) => {
      let text = "";
      socket.on("data", (chunk) => {
        text += chunk.toString();
        if ((text.match(/HTTP\/1\.1 /g) ?? []).length === 2 && text.endsWith("}")) resolve(text);
      });
      socket.write(requestHead("/v1/track", { "content-length": String(big.length) }) + big);
      socket.write(requestHead("/v1/track", { "content-length": String(small.length) }) + small);
    });
    socket.destroy();
    expect(replies).toMatch(/^HTTP\/1\.1 400 [^]*request_too_large[^]*HTTP\/1\.1 200 [^]*\{"success":true\}$/);
  });

  it(`a chunked upload that goes on past ${DRAIN_LIMIT_BYTES / 1024 / 1024}MB is cut off after its 400`, async () => {
    const url = new URL(env.ingest.url);
    const socket: Socket = connect(Number(url.port), url.hostname);
    const chunk = Buffer.alloc(64 * 1024, "x");
    const hex = chunk.length.toString(16);
    let sent = 0;
    let text = "";
    socket.on("data", (c) => (text += c.toString()));
    const closed = new Promise<void>((resolve) => {
      socket.on("error", () => resolve());
      socket.on("close", () => resolve());
    });
    socket.write(requestHead("/v1/batch", { "transfer-encoding": "chunked" }));
    // Writes until the server closes the connection, or 64MB (a failure).
    while (!socket.destroyed && sent < 64 * 1024 * 1024) {
      const ok = socket.write(`${hex}\r\n${chunk.toString()}\r\n`);
      sent += chunk.length;
      if (!ok) await Promise.race([new Promise((r) => socket.once("drain", r)), closed]);
    }
    await closed;
    expect(text).toMatch(/^HTTP\/1\.1 400 [^]*batch_too_large/);
    expect(sent).toBeLessThan(32 * 1024 * 1024);
  });
});

describe("content headers (ADR 2: any Content-Type is read as JSON)", () => {
  it("a malformed Content-Type, as a client merging headers sends it, is read as JSON and stored (regression: 400)", async () => {
    for (const type of ["application/json, text/plain", "json", "???"]) {
      const id = uniqueId();
      const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: { ...auth, "content-type": type }, raw: JSON.stringify({ userId: "u", event: "Typed", messageId: id }) });
      expect(res.status, type).toBe(200);
      expect((await storedMessages(env.nats)).some((m) => m.body.messageId === id), type).toBe(true);
    }
  });

  it("an empty Content-Encoding is no encoding; raw DEFLATE under \"deflate\" is read as well as the zlib format", async () => {
    const plain = uniqueId();
    const empty = await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "Empty encoding", messageId: plain }, { headers: { ...auth, "content-encoding": "" } });
    expect(empty.status).toBe(200);
    const rawId = uniqueId();
    const res = await fetch(`${env.ingest.url}/v1/track`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json", "content-encoding": "deflate" },
      body: deflateRawSync(JSON.stringify({ userId: "u", event: "Raw deflate", messageId: rawId })),
    });
    expect(res.status).toBe(200);
    const stored = new Set((await storedMessages(env.nats)).map((m) => m.body.messageId));
    expect(stored.has(plain) && stored.has(rawId)).toBe(true);
  });

  it("raw DEFLATE whose first byte arrives alone is read too (found by a fuzz review: read as zlib, 400 invalid_compression)", async () => {
    for (const [format, compress] of [["raw", deflateRawSync], ["zlib", deflateSync]] as const) {
      const id = uniqueId(format);
      const body = compress(JSON.stringify({ userId: "u", event: "Split deflate", messageId: id }));
      const res = await postChunked(`${env.ingest.url}/v1/track`, [body.subarray(0, 1), body.subarray(1)], { ...auth, "content-encoding": "deflate" });
      expect(res.status, format).toBe(200);
      expect((await storedMessages(env.nats)).some((m) => m.body.messageId === id)).toBe(true);
    }
  });
});
