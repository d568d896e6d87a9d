// Test harness: a real HTTP forward proxy on 127.0.0.1, as a cluster's egress proxy (Squid, say)
// would behave: CONNECT tunnels for https, absolute-form requests for http, optional Basic
// credentials (407 without them), and rules that refuse some targets (403). It records what it
// was asked for.
import { createServer, request, type IncomingMessage, type Server } from "node:http";
import { connect, type Socket } from "node:net";

export interface ProxiedRequest {
  /** `CONNECT` or the absolute-form request's method. */
  method: string;
  /** `host:port` for CONNECT, the absolute URL otherwise. */
  target: string;
  authorization: string | undefined;
}

export interface TestProxy {
  url: string;
  requests: ProxiedRequest[];
  /** Targets (`host:port`) the proxy's rules refuse with 403. */
  deny: Set<string>;
  close(): Promise<void>;
}

export async function startProxy(options: { credentials?: string } = {}): Promise<TestProxy> {
  const requests: ProxiedRequest[] = [];
  const deny = new Set<string>();
  const sockets = new Set<Socket>();
  const expected = options.credentials ? `Basic ${Buffer.from(options.credentials).toString("base64")}` : undefined;
  const allowed = (req: IncomingMessage) => expected === undefined || req.headers["proxy-authorization"] === expected;

  const server: Server = createServer((req, res) => {
    requests.push({ method: req.method ?? "", target: req.url ?? "", authorization: req.headers["proxy-authorization"] });
    if (!allowed(req)) return void res.writeHead(407, { "proxy-authenticate": 'Basic realm="test"' }).end();
    const target = URL.parse(req.url ?? "");
    if (!target) return void res.writeHead(400).end("not an absolute-form request");
    if (deny.has(target.host)) return void res.writeHead(403).end("denied by the proxy's rules");
    const headers = { ...req.headers };
    delete headers["proxy-authorization"];
    delete headers["proxy-connection"];
    const upstream = request(target, { method: req.method, headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", () => res.writeHead(502).end("upstream failed"));
    req.pipe(upstream);
  });
  server.on("connect", (req: IncomingMessage, client: Socket, head: Buffer) => {
    requests.push({ method: "CONNECT", target: req.url ?? "", authorization: req.headers["proxy-authorization"] });
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.on("error", () => client.destroy());
    if (!allowed(req)) return void client.end('HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm="test"\r\n\r\n');
    if (deny.has(req.url ?? "")) return void client.end("HTTP/1.1 403 Forbidden\r\n\r\n");
    const [host, port] = splitHostPort(req.url ?? "");
    const upstream = connect(port, host, () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    sockets.add(upstream);
    upstream.on("close", () => sockets.delete(upstream));
    upstream.on("error", () => {
      if (!client.writableEnded) client.end("HTTP/1.1 502 Bad Gateway\r\n\r\n");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: options.credentials ? `http://${options.credentials}@127.0.0.1:${port}` : `http://127.0.0.1:${port}`,
    requests,
    deny,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function splitHostPort(target: string): [string, number] {
  const at = target.lastIndexOf(":");
  return [target.slice(0, at).replace(/^\[|\]$/g, ""), Number(target.slice(at + 1))];
}
