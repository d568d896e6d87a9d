// Webhooks through an egress proxy (--egress-proxy), against a real forward proxy and real HTTP
// and HTTPS receivers on loopback: https goes through a CONNECT tunnel with the receiver's
// certificate still verified, http as absolute-form requests; noProxy hosts go directly; names
// that resolve to private addresses are still refused; the proxy's own failures (down, 407, its
// rules' 403) are proxy_error, retried, never blamed on the receiver. Found by a platform-team
// review: a cluster whose egress goes only through a proxy could deliver nothing.
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { createServer as createTcpServer, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebhookSender, type SendRequest } from "../../dataplane/delivery/sender.ts";
import { egressProxy, redactProxyUrl, InvalidEgressProxyError } from "../../dataplane/delivery/egress-proxy.ts";
import { freePort } from "../harness/ports.ts";
import { startProxy, type TestProxy } from "../harness/proxy.ts";
import { selfSignedCert } from "../harness/tls.ts";

const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

let cert: string;
let httpsPort: number;
let httpPort: number;
const received: Array<{ scheme: string; path: string; headers: IncomingHttpHeaders; body: string }> = [];

beforeAll(async () => {
  const tls = selfSignedCert();
  cert = tls.cert;
  const record = (scheme: string) => (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({ scheme, path: req.url ?? "/", headers: req.headers, body: Buffer.concat(chunks).toString() });
      res.end(`${scheme} ok`);
    });
  };
  for (const [server, set] of [
    [createHttpsServer(tls, record("https")), (p: number) => (httpsPort = p)],
    [createServer(record("http")), (p: number) => (httpPort = p)],
  ] as const) {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    set((server.address() as { port: number }).port);
    cleanups.push(() => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }));
  }
});

async function proxy(options: { credentials?: string } = {}): Promise<TestProxy> {
  const started = await startProxy(options);
  cleanups.push(() => started.close());
  return started;
}

function sender(proxyUrl: string, options: { noProxy?: string[]; allowPrivateNetworks?: boolean; trust?: boolean } = {}): WebhookSender {
  const s = new WebhookSender({
    allowPrivateNetworks: options.allowPrivateNetworks ?? true, userAgent: "trackhook-test/1.0",
    proxy: egressProxy(proxyUrl, options.noProxy ?? []), ...(options.trust === false ? {} : { ca: cert }),
  });
  cleanups.push(() => s.close());
  return s;
}

const post = (url: string, extra: Partial<SendRequest> = {}): SendRequest => ({
  pool: "default/proxied", url, body: new TextEncoder().encode('{"type":"track"}'), headers: { "X-Signature": "sig" }, timeoutMs: 5_000, ...extra,
});
const receivedAt = (path: string) => received.filter((r) => r.path === path);

describe("through an egress proxy", () => {
  it("an https receiver is reached through a CONNECT tunnel, its certificate verified end to end", async () => {
    const p = await proxy();
    const result = await sender(p.url).send(post(`https://localhost:${httpsPort}/tunnelled`));
    expect(result).toMatchObject({ outcome: { kind: "delivered", status: 200 }, responseSnippet: "https ok" });
    expect(p.requests).toEqual([{ method: "CONNECT", target: `localhost:${httpsPort}`, authorization: undefined }]);
    expect(receivedAt("/tunnelled")).toEqual([expect.objectContaining({ scheme: "https", body: '{"type":"track"}', headers: expect.objectContaining({ "x-signature": "sig" }) })]);

    // The tunnel changes nothing of TLS: a certificate that is not trusted fails, and nothing is sent.
    const untrusted = await sender(p.url, { trust: false }).send(post(`https://localhost:${httpsPort}/untrusted`));
    expect(untrusted.outcome).toEqual({ kind: "retry", error: "tls_verification_failed" });
    expect(receivedAt("/untrusted")).toHaveLength(0);
  });

  it("an http receiver gets an absolute-form request through the proxy, headers and body intact", async () => {
    const p = await proxy();
    const result = await sender(p.url).send(post(`http://127.0.0.1:${httpPort}/forwarded?x=1`));
    expect(result).toMatchObject({ outcome: { kind: "delivered", status: 200 }, responseSnippet: "http ok" });
    expect(p.requests).toEqual([{ method: "POST", target: `http://127.0.0.1:${httpPort}/forwarded?x=1`, authorization: undefined }]);
    expect(receivedAt("/forwarded?x=1")).toEqual([expect.objectContaining({ body: '{"type":"track"}', headers: expect.objectContaining({ "x-signature": "sig", "user-agent": "trackhook-test/1.0" }) })]);
  });

  it("hosts of noProxy are reached directly", async () => {
    const p = await proxy();
    const s = sender(p.url, { noProxy: ["127.0.0.1", ".example.internal"] });
    expect((await s.send(post(`http://127.0.0.1:${httpPort}/direct`))).outcome).toMatchObject({ kind: "delivered" });
    expect((await s.send(post(`https://127.0.0.1:${httpsPort}/direct-tls`))).outcome).toMatchObject({ kind: "delivered" });
    expect(p.requests).toEqual([]);
    // Not every host: localhost is not in the list.
    expect((await s.send(post(`https://localhost:${httpsPort}/via`))).outcome).toMatchObject({ kind: "delivered" });
    expect(p.requests.map((r) => r.target)).toEqual([`localhost:${httpsPort}`]);
  });

  it("credentials in the proxy's URL are sent to the proxy only; without them its 407 is a proxy_error, retried", async () => {
    const p = await proxy({ credentials: "team:s3cret" });
    const withCredentials = sender(p.url);
    expect((await withCredentials.send(post(`https://localhost:${httpsPort}/authed-tls`))).outcome).toMatchObject({ kind: "delivered" });
    expect((await withCredentials.send(post(`http://127.0.0.1:${httpPort}/authed`))).outcome).toMatchObject({ kind: "delivered" });
    const basicAuth = `Basic ${Buffer.from("team:s3cret").toString("base64")}`;
    expect(p.requests.map((r) => r.authorization)).toEqual([basicAuth, basicAuth]);
    expect(receivedAt("/authed")[0]!.headers["proxy-authorization"]).toBeUndefined();

    const without = sender(p.url.replace("team:s3cret@", ""));
    for (const url of [`https://localhost:${httpsPort}/unauthed-tls`, `http://127.0.0.1:${httpPort}/unauthed`]) {
      const result = await without.send(post(url));
      expect(result.outcome, url).toEqual({ kind: "retry", error: "proxy_error" });
      expect(result.detail, url).toMatch(/407/);
    }
    expect(receivedAt("/unauthed-tls").length + receivedAt("/unauthed").length).toBe(0);
  });

  it("a proxy that is down, or whose rules refuse the receiver, is a proxy_error, not the receiver refusing connections", async () => {
    const down = sender(`http://127.0.0.1:${await freePort()}`);
    for (const url of [`https://localhost:${httpsPort}/down-tls`, `http://127.0.0.1:${httpPort}/down`]) {
      const result = await down.send(post(url));
      expect(result.outcome, url).toEqual({ kind: "retry", error: "proxy_error" });
      expect(result.detail, url).toMatch(/ECONNREFUSED/);
    }
    const p = await proxy();
    p.deny.add(`localhost:${httpsPort}`);
    const denied = await sender(p.url).send(post(`https://localhost:${httpsPort}/denied`));
    expect(denied.outcome).toEqual({ kind: "retry", error: "proxy_error" });
    expect(denied.detail).toMatch(/403/);
    expect(receivedAt("/denied")).toHaveLength(0);
  });

  it("without allowPrivateNetworks, a name that resolves to a private address is still refused before the proxy is asked; a name only the proxy can resolve is left to it", async () => {
    const p = await proxy();
    const s = sender(p.url, { allowPrivateNetworks: false });
    // Names that can only be private are refused even where they do not resolve (the proxy might resolve them).
    for (const url of [`https://localhost:${httpsPort}/private`, `http://127.0.0.1:${httpPort}/private`, `http://[::1]:${httpPort}/private`, "https://hooks.localhost/private", "http://receiver.team.svc.cluster.local/private"]) {
      expect((await s.send(post(url))).outcome, url).toEqual({ kind: "permanent", error: "private_address_refused" });
    }
    expect(p.requests).toEqual([]);
    // Not resolvable here: the proxy resolves it (and here fails to: its 502 to CONNECT).
    const unknown = await s.send(post("https://receiver.invalid/hook"));
    expect(p.requests.map((r) => r.target)).toEqual(["receiver.invalid:443"]);
    expect(unknown.outcome).toEqual({ kind: "retry", error: "proxy_error" });
  });

  it("a proxy that takes the connection and never answers CONNECT costs the attempt its deadline, and holds nothing for long: close() ends (regression: 300 s)", async () => {
    const sockets: Socket[] = [];
    const silent = createTcpServer((socket) => void sockets.push(socket.on("error", () => {})));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      silent.close(() => resolve());
    }));
    const s = new WebhookSender({ allowPrivateNetworks: true, userAgent: "trackhook-test/1.0", proxy: egressProxy(`http://127.0.0.1:${(silent.address() as { port: number }).port}`), ca: cert });
    const started = performance.now();
    expect((await s.send(post(`https://localhost:${httpsPort}/silent`, { timeoutMs: 1_000 }))).outcome).toEqual({ kind: "retry", error: "timeout" });
    expect(performance.now() - started).toBeLessThan(3_000);
    const closing = performance.now();
    await s.close();
    expect(performance.now() - closing).toBeLessThan(15_000);
  }, 30_000);

  it("a header undici refuses to send through a proxy settles the attempt instead of throwing (send never throws)", async () => {
    const p = await proxy();
    const result = await sender(p.url).send(post(`https://localhost:${httpsPort}/refused-header`, { headers: { "Proxy-Authorization": "Basic eDp5" } }));
    expect(result.outcome).toEqual({ kind: "permanent", error: "network_error" });
    expect(p.requests).toEqual([]);
  });
});

describe("egressProxy()", () => {
  it("takes http and https proxy URLs and NO_PROXY-style entries", () => {
    expect(egressProxy("http://proxy.example:3128", ["internal.example", ".corp", "*.svc", "10.1.2.3", "[::1]:8080", "::1", "host:443", "*"])).toEqual({
      url: "http://proxy.example:3128", noProxy: ["internal.example", ".corp", "*.svc", "10.1.2.3", "[::1]:8080", "::1", "host:443", "*"],
    });
    expect(egressProxy("https://user:pw@proxy.example/").url).toBe("https://user:pw@proxy.example/");
  });

  it("refuses what is not a proxy URL, saying why, without printing its credentials", () => {
    for (const [url, why] of [
      ["proxy.example:3128", /not the http:\/\/ or https:\/\/ URL of a proxy/],
      ["socks5://proxy.example:1080", /not the http:\/\/ or https:\/\/ URL/],
      ["http://user:topsecret@proxy.example:3128/path", /has a path, query or fragment/],
      ["http://proxy.example:3128?x=1", /has a path, query or fragment/],
    ] as const) {
      expect(() => egressProxy(url), url).toThrow(InvalidEgressProxyError);
      expect(() => egressProxy(url), url).toThrow(why);
      expect(() => egressProxy(url), url).not.toThrow(/topsecret/);
    }
    // A raw % in the password: undici could not decode it, and every attempt would fail.
    expect(() => egressProxy("http://team:100%@proxy:3128")).toThrow(/not valid percent-encoding: write % as %25/);
    expect(() => egressProxy("http://team:100%@proxy:3128")).not.toThrow(/100%/);
    expect(egressProxy("http://team:100%25@proxy:3128").url).toBe("http://team:100%25@proxy:3128");
    expect(() => egressProxy("http://proxy:3128", ["https://example.com"])).toThrow(/--egress-no-proxy: "https:\/\/example.com" is not a host/);
    expect(() => egressProxy("http://proxy:3128", ["a b"])).toThrow(/is not a host/);
  });

  it("redactProxyUrl hides credentials", () => {
    expect(redactProxyUrl("http://user:pw@proxy.example:3128")).toBe("http://…@proxy.example:3128");
    expect(redactProxyUrl("http://proxy.example:3128")).toBe("http://proxy.example:3128");
    expect(redactProxyUrl("not a url user:pw@x")).not.toContain("pw");
    // A password with a raw "/" or "?" makes it no URL: nothing before the last "@" is shown.
    for (const url of ["http://team:pa/ss@proxy:3128", "user:pa/ssword@proxy:3128", "http://u:p?w/x@proxy:3128"]) {
      expect(redactProxyUrl(url), url).not.toMatch(/pa|ss|p\?w|x@/);
      expect(redactProxyUrl(url), url).toContain("…@proxy");
    }
  });
});
