// Test harness: a real HTTP webhook receiver on 127.0.0.1 that records every request (raw body
// bytes included) and answers as each test scripts it.
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import { Webhook } from "standardwebhooks";

export interface ReceivedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  /** Header names as they were sent (Node lower-cases those of `headers`), each followed by its value. */
  rawHeaders: string[];
  body: Buffer;
  at: number;
}

/** Answers the n-th request (0-based) to a path; the default answers 200. */
export type Responder = (request: ReceivedRequest, n: number, res: ServerResponse) => void;

export interface Receiver {
  url(path?: string): string;
  requests(path?: string): ReceivedRequest[];
  /** Sets how one path answers. */
  on(path: string, responder: Responder): void;
  waitFor(path: string, count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

export const answer = (status: number, headers: Record<string, string> = {}): Responder => (_req, _n, res) => {
  res.writeHead(status, headers).end(status < 300 ? "ok" : "nope");
};

/** Whether the official Standard Webhooks library, holding this one secret, accepts the request. */
export function standardWebhooksVerifies(secret: string, request: Pick<ReceivedRequest, "body" | "headers">): boolean {
  try {
    new Webhook(secret).verify(request.body.toString(), request.headers as Record<string, string>);
    return true;
  } catch {
    return false;
  }
}

export async function startReceiver(): Promise<Receiver> {
  const received: ReceivedRequest[] = [];
  const responders = new Map<string, Responder>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const request = { path: req.url ?? "/", headers: req.headers, rawHeaders: req.rawHeaders, body: Buffer.concat(chunks), at: Date.now() };
      const n = received.filter((r) => r.path === request.path).length;
      received.push(request);
      (responders.get(request.path) ?? answer(200))(request, n, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  const requests = (path?: string) => received.filter((r) => path === undefined || r.path === path);
  return {
    url: (path = "/") => `http://127.0.0.1:${port}${path}`,
    requests,
    on: (path, responder) => void responders.set(path, responder),
    async waitFor(path, count, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      while (requests(path).length < count) {
        if (Date.now() > deadline) throw new Error(`${path}: ${requests(path).length} of ${count} requests within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 25));
      }
      return requests(path);
    },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
