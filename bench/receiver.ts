// The webhook receiver of bench/delivery.ts: the cheapest keep-alive HTTP server that answers
// every POST with 200 at once and notes when each delivery arrived (on the machine's monotonic
// clock, the bench's sharedClockMs) under its X-Delivery-Id. Run as a child process
// with an IPC channel: `node bench/receiver.ts [port]`; prints `listening <url>` once ready and
// answers IPC queries:
//   { id, cmd: "reset" }                    forget every arrival so far
//   { id, cmd: "count" }                    -> { id, count }
//   { id, cmd: "stats", arrivals?: true }   -> { id, count, distinct, first, last, unlabelled, arrivals?: [deliveryId, ms][] }
import { createServer } from "node:http";

type Query = { id: number; cmd: "reset" | "count" | "stats"; arrivals?: boolean };

// The bench's sharedClockMs (bench/lib.ts), not imported: this process stays the cheapest server.
const sharedClockMs = () => Number(process.hrtime.bigint()) / 1e6;

let ids: string[] = [];
let ats: number[] = [];
let unlabelled = 0;

const server = createServer((req, res) => {
  const at = sharedClockMs();
  const id = req.headers["x-delivery-id"];
  if (typeof id === "string") {
    ids.push(id);
    ats.push(at);
  } else {
    unlabelled++;
  }
  req.resume();
  req.once("end", () => {
    res.writeHead(200, { "content-type": "text/plain", "content-length": "2" });
    res.end("ok");
  });
});
// Longer than any client's keep-alive, so connections are only closed by the client.
server.keepAliveTimeout = 120_000;
server.headersTimeout = 121_000;

process.on("message", (q: Query) => {
  if (q.cmd === "reset") {
    ids = [];
    ats = [];
    unlabelled = 0;
    process.send!({ id: q.id });
  } else if (q.cmd === "count") {
    process.send!({ id: q.id, count: ids.length });
  } else {
    let first = Infinity;
    let last = -Infinity;
    for (const at of ats) {
      if (at < first) first = at;
      if (at > last) last = at;
    }
    process.send!({
      id: q.id,
      count: ids.length,
      distinct: new Set(ids).size,
      first,
      last,
      unlabelled,
      ...(q.arrivals ? { arrivals: ids.map((d, i) => [d, ats[i]]) } : {}),
    });
  }
});
// The bench is gone: so are we.
process.on("disconnect", () => process.exit(0));

server.listen(Number(process.argv[2] ?? 0), "127.0.0.1", () => {
  const { port } = server.address() as { port: number };
  process.stdout.write(`listening http://127.0.0.1:${port}\n`);
});

const stop = () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
