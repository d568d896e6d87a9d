// The operations endpoints of a component without an HTTP API of its own (deliver, and later the
// operator): /healthz (the process runs), /readyz (its dependencies answer), /metrics.
import Fastify, { type FastifyInstance } from "fastify";
import type { Registry } from "prom-client";

export interface OpsServerOptions {
  registry: Registry;
  ready(): Promise<{ ready: boolean; reason?: string }>;
}

export function buildOpsServer({ registry, ready }: OpsServerOptions): FastifyInstance {
  const app = Fastify({ logger: false });
  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async (_request, reply) => {
    const state = await ready();
    reply.code(state.ready ? 200 : 503);
    return state.ready ? { status: "ready" } : { status: "not_ready", reason: state.reason };
  });
  app.get("/metrics", async (_request, reply) => {
    reply.header("content-type", registry.contentType);
    return registry.metrics();
  });
  return app;
}
