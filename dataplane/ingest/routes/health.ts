// Liveness, readiness and Prometheus metrics.
import type { FastifyInstance } from "fastify";
import type { IngestState } from "../state.ts";

export function healthRoutes(app: FastifyInstance, state: IngestState): void {
  app.get("/healthz", async () => ({ status: "ok" }));

  app.get("/readyz", async (_request, reply) => {
    const { ready, reason } = await state.ready();
    reply.code(ready ? 200 : 503);
    return ready ? { status: "ready" } : { status: "not_ready", reason };
  });

  app.get("/metrics", async (_request, reply) => {
    reply.header("content-type", state.registry.contentType);
    return state.registry.metrics();
  });
}
