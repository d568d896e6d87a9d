// One webhook attempt against real receivers on loopback (HTTP and HTTPS with a self-signed
// certificate): what arrives, how each answer or failure is classified, that redirects are not
// followed, that the deadline covers the whole exchange, and that private addresses and
// unverifiable certificates get no request at all.
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { createServer as createTcpServer, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { BODY_GRACE_MS, MAX_CONNECTIONS_PER_ORIGIN, WebhookSender, outcomeOfError, type SendRequest } from "../../dataplane/delivery/sender.ts";

const USER_AGENT = "trackhook-test/1.0";
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** Starts a server on 127.0.0.1:0 that is closed (connections included) after the file. */
async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return (server.address() as { port: number }).port;
}

function sender(allowPrivateNetworks = true, ca?: string, connections?: number): WebhookSender {
  const s = new WebhookSender({ allowPrivateNetworks, userAgent: USER_AGENT, ...(ca ? { ca } : {}), ...(connections ? { connections } : {}) });
  cleanups.push(() => s.close());
  return s;
}

const post = (url: string, extra: Partial<SendRequest> = {}): SendRequest => ({
  pool: "default/test",
  url,
  body: new TextEncoder().encode('{"type":"track"}'),
  headers: {},
  timeoutMs: 5_000,
  ...extra,
});

// One receiver; the path picks the answer. Every request is recorded before it is answered.
const received: Received[] = [];
const routes: Record<string, (res: ServerResponse) => void> = {
  "/ok": (res) => res.end("thanks"),
  "/fail": (res) => res.writeHead(500).end("broken"),
  "/busy": (res) => res.writeHead(429, { "retry-after": "7" }).end(),
  "/missing": (res) => res.writeHead(404).end(),
  "/redirect": (res) => res.writeHead(302, { location: "/target" }).end(),
  "/target": (res) => res.end("should not be reached"),
  "/slow": (res) => {
    const timer = setTimeout(() => res.end("late"), 6_000);
    res.on("close", () => clearTimeout(timer));
  },
  "/stall": (res) => {
    const timer = setTimeout(() => res.end("eventually"), 1_500);
    res.on("close", () => clearTimeout(timer));
  },
  "/slow-body": (res) => {
    res.writeHead(200).write("ok");
    const timer = setTimeout(() => res.end(" and the rest"), 3_000);
    res.on("close", () => clearTimeout(timer));
  },
  "/cut-body": (res) => {
    res.writeHead(200, { "content-length": "100" }).write("partial");
    setTimeout(() => res.socket?.destroy(), 50);
  },
  "/big": (res) => res.end(Buffer.alloc(1024 * 1024, "x")),
  "/hangup": (res) => res.socket?.destroy(),
};
let base: string;
let port: number;

beforeAll(async () => {
  port = await listen(createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const path = req.url ?? "/";
      received.push({ path, headers: req.headers, body: Buffer.concat(chunks) });
      (routes[path] ?? ((r: ServerResponse) => r.writeHead(404).end()))(res);
    });
  }));
  base = `http://127.0.0.1:${port}`;
});

const requestsTo = (path: string) => received.filter((r) => r.path === path);

describe("answers from the receiver", () => {
  it("2xx is delivered; headers and body bytes arrive exactly", async () => {
    const body = new TextEncoder().encode('{"type":"track","event":"Signed Up","properties":{"plan":"pro","emoji":"✓"}}');
    const result = await sender().send(post(`${base}/ok`, {
      body,
      // A caller's content-type must not win; its other headers must arrive as given.
      headers: { "X-Custom": "hello", "Content-Type": "text/plain" },
    }));
    expect(result).toMatchObject({ url: `${base}/ok`, outcome: { kind: "delivered", status: 200 }, responseSnippet: "thanks" });
    expect(result.latencyMs).toBeGreaterThan(0);
    const [req] = requestsTo("/ok");
    expect(req).toBeDefined();
    expect(req!.headers["content-type"]).toBe("application/json");
    expect(req!.headers["user-agent"]).toBe(USER_AGENT);
    expect(req!.headers["x-custom"]).toBe("hello");
    expect(Buffer.compare(req!.body, Buffer.from(body))).toBe(0);
  });

  it("5xx is retried, with its status", async () => {
    const result = await sender().send(post(`${base}/fail`));
    expect(result.outcome).toEqual({ kind: "retry", status: 500 });
    expect(result.responseSnippet).toBe("broken");
  });

  it("429 with Retry-After is retried after that many seconds", async () => {
    expect((await sender().send(post(`${base}/busy`))).outcome).toEqual({ kind: "retry", status: 429, retryAfterMs: 7_000 });
  });

  it("404 fails for good", async () => {
    expect((await sender().send(post(`${base}/missing`))).outcome).toEqual({ kind: "permanent", status: 404 });
  });

  it("a redirect is not followed and fails for good", async () => {
    expect((await sender().send(post(`${base}/redirect`))).outcome).toEqual({ kind: "permanent", status: 302 });
    expect(requestsTo("/redirect")).toHaveLength(1);
    expect(requestsTo("/target")).toHaveLength(0);
  });

  it("keeps only the first 512 bytes of a 1 MB answer", async () => {
    const result = await sender().send(post(`${base}/big`));
    expect(result.outcome).toEqual({ kind: "delivered", status: 200 });
    expect(result.responseSnippet).toHaveLength(512);
  });
});

describe("the connection after an answer", () => {
  // A dedicated receiver that counts the connections it accepted.
  async function counting(size: number): Promise<{ url: string; connections: () => number }> {
    let connections = 0;
    const server = createServer((req, res) => {
      req.resume();
      req.on("end", () => res.end(Buffer.alloc(size, "y")));
    });
    server.on("connection", () => connections++);
    const p = await listen(server);
    return { url: `http://127.0.0.1:${p}/`, connections: () => connections };
  }

  it("an answer past the snippet but within the drain limit is read to its end, and the connection reused", async () => {
    const receiver = await counting(20 * 1024);
    const single = sender(true, undefined, 1);
    for (let i = 0; i < 3; i++) {
      const result = await single.send(post(receiver.url));
      expect(result.outcome).toEqual({ kind: "delivered", status: 200 });
      expect(result.responseSnippet).toBe("y".repeat(512));
    }
    expect(receiver.connections()).toBe(1);
  });

  it(`keeps at most ${MAX_CONNECTIONS_PER_ORIGIN} connections to one origin; requests beyond wait for one (regression: thousands of connections to a trickling receiver spent the process's CPU in undici's walk over them)`, async () => {
    let open = 0;
    let peak = 0;
    const server = createServer((req, res) => {
      req.resume();
      req.on("end", () => setTimeout(() => res.end("ok"), 300));
    });
    server.on("connection", (socket: Socket) => {
      peak = Math.max(peak, ++open);
      socket.on("close", () => open--);
    });
    const url = `http://127.0.0.1:${await listen(server)}/`;
    const many = sender();
    const results = await Promise.all(Array.from({ length: MAX_CONNECTIONS_PER_ORIGIN + 100 }, () => many.send(post(url))));
    expect(results.every((r) => r.outcome.kind === "delivered")).toBe(true);
    expect(peak).toBe(MAX_CONNECTIONS_PER_ORIGIN);
  });

  it("gives each destination its own connections: one's slow answers on a shared host do not hold up another's (regression: one pool per origin, the fast destination's requests waited and were recorded as timeouts)", async () => {
    const server = createServer((req, res) => {
      req.resume();
      req.on("end", () => (req.url === "/slow" ? setTimeout(() => res.end("ok"), 1_500) : res.end("ok")));
    });
    const origin = `http://127.0.0.1:${await listen(server)}`;
    const shared = sender(true, undefined, 4);
    // The slow destination fills its connections to the host, and has more waiting.
    const slow = Array.from({ length: 8 }, () => shared.send(post(`${origin}/slow`, { pool: "tenant-a/slow" })));
    await new Promise((r) => setTimeout(r, 100));
    const fast = await shared.send(post(`${origin}/fast`, { pool: "tenant-b/fast", timeoutMs: 1_000 }));
    expect(fast.outcome).toEqual({ kind: "delivered", status: 200 });
    expect(fast.latencyMs).toBeLessThan(500);
    expect((await Promise.all(slow)).every((r) => r.outcome.kind === "delivered")).toBe(true);
  });

  it("reads an answer with 20 KB of headers (regression: Node's 16 KiB limit made a 200 a network_error, sent again for hours)", async () => {
    const server = createServer((req, res) => {
      req.resume();
      req.on("end", () => res.writeHead(200, { "set-cookie": `s=${"c".repeat(20 * 1024)}` }).end("ok"));
    });
    const result = await sender().send(post(`http://127.0.0.1:${await listen(server)}/`));
    expect(result.outcome).toEqual({ kind: "delivered", status: 200 });
  });

  it("an answer past the drain limit costs its connection, not the next attempt", async () => {
    const receiver = await counting(1024 * 1024);
    const single = sender(true, undefined, 1);
    for (let i = 0; i < 2; i++) expect((await single.send(post(receiver.url))).outcome).toEqual({ kind: "delivered", status: 200 });
    expect(receiver.connections()).toBe(2);
  });
});

describe("failures on the way", () => {
  it("a DNS server that refuses queries is a dns_error, not the receiver's connection_refused (found by a diff review)", () => {
    const refused = Object.assign(new Error("queryA ECONNREFUSED hooks.example.com"), { code: "ECONNREFUSED" });
    const lookupFailed = Object.assign(new Error("DNS lookup of hooks.example.com failed: ECONNREFUSED"), { code: "EAI_AGAIN", cause: refused });
    expect(outcomeOfError(lookupFailed, false)).toEqual({ kind: "retry", error: "dns_error" });
    expect(outcomeOfError(refused, false)).toEqual({ kind: "retry", error: "connection_refused" });
  });

  /** A raw TCP receiver that answers every request with `answer`, then closes. */
  async function raw(answer: string): Promise<string> {
    const server = createTcpServer((socket) => {
      socket.once("data", () => socket.end(answer));
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    return `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  }

  it.each([
    ["a repeated Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", "CONTENT_LENGTH"],
    ["headers past 64 KiB", `HTTP/1.1 200 OK\r\nX-Big: ${"b".repeat(70 * 1024)}\r\nContent-Length: 2\r\n\r\nok`, "UND_ERR_HEADERS_OVERFLOW"],
    ["a status line that is not HTTP", "garbage\r\n\r\n", "HTTPParserError"],
  ])("an answer the client cannot read (%s) is invalid_response, retried, with what the client said (regression: network_error, and logged as not answering)", async (_what, answer, code) => {
    const result = await sender().send(post(await raw(answer)));
    expect(result.outcome).toEqual({ kind: "retry", error: "invalid_response" });
    expect(result.detail).toContain(code);
  });

  it("an https URL on a plain HTTP port says so in the detail", async () => {
    const result = await sender().send(post(base.replace("http:", "https:")));
    expect(result.outcome).toMatchObject({ kind: "retry" });
    expect(result.detail).toMatch(/SSL|TLS|wrong version/i);
  });

  it("an answer after 6 s with a 5 s timeout is a retryable timeout, given up at 5 s", async () => {
    const result = await sender().send(post(`${base}/slow`, { timeoutMs: 5_000 }));
    expect(result.outcome).toEqual({ kind: "retry", error: "timeout" });
    expect(result.latencyMs).toBeGreaterThanOrEqual(4_900);
    expect(result.latencyMs).toBeLessThan(5_900);
  }, 15_000);

  it("a 200 sent in time whose body is still streaming at the deadline is delivered, not a timeout to retry", async () => {
    const result = await sender().send(post(`${base}/slow-body`, { timeoutMs: 1_000 }));
    expect(result.outcome).toEqual({ kind: "delivered", status: 200 });
    expect(result.responseSnippet).toBe("ok");
    expect(result.latencyMs).toBeLessThan(2_000);
  });

  it("a 200 whose body trickles in is delivered a second after its status, and its connection dropped (regression: a tenant's trickling receivers held ~4,500 sockets for the whole 5 s deadline)", async () => {
    let closedAt: number | undefined;
    const server = createServer((req, res) => {
      req.resume();
      res.writeHead(200).write("o");
      const drip = setInterval(() => res.write("k"), 50);
      res.on("close", () => {
        clearInterval(drip);
        closedAt = performance.now();
      });
    });
    const url = `http://127.0.0.1:${await listen(server)}/`;
    const started = performance.now();
    const result = await sender().send(post(url, { timeoutMs: 5_000 }));
    expect(result.outcome).toEqual({ kind: "delivered", status: 200 });
    expect(result.responseSnippet).toMatch(/^ok+$/);
    expect(result.latencyMs).toBeGreaterThanOrEqual(BODY_GRACE_MS - 50);
    expect(result.latencyMs).toBeLessThan(BODY_GRACE_MS + 1_000);
    await vi.waitFor(() => expect(closedAt).toBeDefined(), { timeout: 3_000 });
    expect(closedAt! - started).toBeLessThan(BODY_GRACE_MS + 1_000);
  });

  it("a 200 whose body breaks off is delivered (the receiver answered)", async () => {
    const result = await sender().send(post(`${base}/cut-body`));
    expect(result.outcome).toEqual({ kind: "delivered", status: 200 });
  });

  it("the deadline also holds while queued behind a busy connection", async () => {
    const single = sender(true, undefined, 1);
    const busy = single.send(post(`${base}/stall`));
    const queued = await single.send(post(`${base}/ok`, { timeoutMs: 500 }));
    expect(queued.outcome).toEqual({ kind: "retry", error: "timeout" });
    expect(queued.latencyMs).toBeLessThan(1_000);
    expect((await busy).outcome).toEqual({ kind: "delivered", status: 200 });
  });

  it("the deadline also holds while the TLS handshake never completes", async () => {
    const sockets: Socket[] = [];
    const silent = createTcpServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const { port: silentPort } = silent.address() as { port: number };
    const result = await sender().send(post(`https://127.0.0.1:${silentPort}/`, { timeoutMs: 1_000 }));
    expect(result.outcome).toEqual({ kind: "retry", error: "timeout" });
    expect(result.latencyMs).toBeLessThan(1_500);
    // undici is still connecting (its own connect timeout is 10 s); ending the socket lets it give up now.
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  });

  it("a closed port is a refused connection", async () => {
    const probe = createServer();
    const closedPort = await new Promise<number>((resolve) => probe.listen(0, "127.0.0.1", () => {
      const { port: p } = probe.address() as { port: number };
      probe.close(() => resolve(p));
    }));
    expect((await sender().send(post(`http://127.0.0.1:${closedPort}/`))).outcome).toEqual({ kind: "retry", error: "connection_refused" });
  });

  it("a receiver hanging up mid-request is a reset connection", async () => {
    expect((await sender().send(post(`${base}/hangup`))).outcome).toEqual({ kind: "retry", error: "connection_reset" });
  });

  it("a name that does not resolve is a DNS error", async () => {
    expect((await sender().send(post("http://does-not-exist.invalid/"))).outcome).toEqual({ kind: "retry", error: "dns_error" });
  });

  it("loopback is refused for good unless private networks are allowed, and nothing is sent", async () => {
    const before = received.length;
    const guarded = sender(false);
    for (const url of [`http://127.0.0.1:${port}/ok`, `http://localhost:${port}/ok`]) {
      expect((await guarded.send(post(url))).outcome, url).toEqual({ kind: "permanent", error: "private_address_refused" });
    }
    expect(received.length).toBe(before);
  });
});

describe("HTTPS", () => {
  let cert: string;
  let httpsBase: string;
  let handled = 0;

  beforeAll(async () => {
    const tls = selfSignedCert();
    cert = tls.cert;
    const server = createHttpsServer(tls, (_req, res) => {
      handled++;
      res.end("secure");
    });
    httpsBase = `https://127.0.0.1:${await listen(server)}`;
  });

  it("a self-signed certificate fails verification, retryably, and no request is sent", async () => {
    expect((await sender().send(post(`${httpsBase}/hook`))).outcome).toEqual({ kind: "retry", error: "tls_verification_failed" });
    expect(handled).toBe(0);
  });

  it("the same receiver is reached once its certificate is trusted (the server works)", async () => {
    const result = await sender(true, cert).send(post(`${httpsBase}/hook`));
    expect(result).toMatchObject({ outcome: { kind: "delivered", status: 200 }, responseSnippet: "secure" });
    expect(handled).toBe(1);
  });
});
import { selfSignedCert } from "../harness/tls.ts";
