// CORS for browsers. analytics-next ≥1.84 sends Authorization (and X-Retry-Count on retries),
// which makes its POSTs preflighted; users may also set credentials: 'include'.
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { IngestState } from "../state.ts";

const ALLOWED_HEADERS = "Authorization, Content-Type, Content-Encoding, X-Retry-Count";

export function corsRoutes(app: FastifyInstance, state: IngestState): void {
  const anyOrigin = state.options.corsOrigins.includes("*");
  const allowed = new Set(state.options.corsOrigins);

  const allowOrigin = (request: FastifyRequest, reply: FastifyReply): boolean => {
    const origin = request.headers.origin;
    reply.header("vary", "Origin");
    if (!origin || !(anyOrigin || allowed.has(origin))) return false;
    // The origin is echoed rather than "*" so that credentialed requests work too.
    reply.header("access-control-allow-origin", origin);
    reply.header("access-control-allow-credentials", "true");
    return true;
  };

  app.addHook("onRequest", (request, reply, done) => {
    if (request.method !== "OPTIONS") allowOrigin(request, reply);
    done();
  });

  app.options("/v1/*", async (request, reply) => {
    if (allowOrigin(request, reply)) {
      reply.header("access-control-allow-methods", "GET, POST, OPTIONS");
      reply.header("access-control-allow-headers", ALLOWED_HEADERS);
      reply.header("access-control-max-age", "86400");
    }
    reply.code(204).send();
  });
}
