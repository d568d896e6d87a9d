// Ceiling B of bench/ingest.ts: the cheapest Fastify server that does what /v1/track must do at
// minimum (read the body, JSON.parse it, answer 200 {"success":true}), with no auth, validation,
// enrichment or storage. Run as a child process: `node bench/bare-fastify.ts [port]`; it prints
// `listening <address>` on stdout once ready and exits on SIGTERM.
import Fastify from "fastify";

const app = Fastify({ logger: false });

// Like the ingest: parse every body ourselves with JSON.parse, whatever its Content-Type.
app.removeAllContentTypeParsers();
app.addContentTypeParser("*", { parseAs: "string" }, (_request, body, done) => {
  try {
    done(null, JSON.parse(body as string));
  } catch (err) {
    (err as { statusCode?: number }).statusCode = 400;
    done(err as Error, undefined);
  }
});

app.post("/v1/track", async (request, reply) => {
  if (!request.body || typeof request.body !== "object") return reply.code(400).send({ success: false });
  reply.header("content-type", "application/json; charset=utf-8");
  return { success: true };
});

const address = await app.listen({ host: "127.0.0.1", port: Number(process.argv[2] ?? 0) });
process.stdout.write(`listening ${address}\n`);

const stop = () => {
  void app.close().then(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
