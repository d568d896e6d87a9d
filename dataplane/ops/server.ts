// The operations endpoints: /healthz (the process runs), /readyz (its dependencies answer),
// /metrics. Components without an HTTP API of their own (deliver, the operator) serve them alone.
import Fastify, { type FastifyInstance } from "fastify";
import type { Registry } from "prom-client";

export interface OpsServerOptions {
  registry: Registry;
  ready(): Promise<{ ready: boolean; reason?: string }>;
}

/** The paths opsRoutes serves. */
export const OPS_PATHS: ReadonlySet<string> = new Set(["/healthz", "/readyz", "/metrics"]);

export function buildOpsServer(options: OpsServerOptions): FastifyInstance {
  const app = Fastify({ logger: false });
  opsRoutes(app, options);
  return app;
}

/** The three routes, on any Fastify app (the ingest serves them beside the Tracking API). */
export function opsRoutes(app: FastifyInstance, { registry, ready }: OpsServerOptions): void {
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
}
