// CORS for browsers. analytics-next ≥1.84 sends Authorization (and X-Retry-Count on retries),
// which makes its POSTs preflighted; users may also set credentials: 'include'.
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { IngestState } from "../state.ts";

const ALLOWED_HEADERS = "Authorization, Content-Type, Content-Encoding, X-Retry-Count";
const EXPOSED_HEADERS = "Retry-After, X-Request-Id";

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

  // Only what browsers are meant to reach: the Tracking API and the analytics.js files. Not
  // /metrics, /healthz or /readyz, which no web page of any origin should read.
  app.addHook("onRequest", (request, reply, done) => {
    // A page's script can read only the response headers it is granted: analytics-next waits for
    // a 429's or 503's Retry-After (it backs off blindly without), and X-Request-Id names the
    // request in the ingest's log.
    if (request.method !== "OPTIONS" && isBrowserPath(request.url) && allowOrigin(request, reply)) reply.header("access-control-expose-headers", EXPOSED_HEADERS);
    done();
  });

  app.options("/v1/*", async (request, reply) => {
    if (allowOrigin(request, reply)) {
      reply.header("access-control-allow-methods", "GET, POST, OPTIONS");
      // The headers the browser asks for are allowed (the origin is what is checked): analytics-next
      // sends any additionalHeaders the site configures, and a refused preflight loses every event.
      const requested = request.headers["access-control-request-headers"];
      reply.header("access-control-allow-headers", requested ? requested : ALLOWED_HEADERS);
      reply.header("vary", "Origin, Access-Control-Request-Headers");
      reply.header("access-control-max-age", "86400");
    }
    reply.code(204).send();
  });
}

const isBrowserPath = (url: string) => url.startsWith("/v1/") || url.startsWith("/analytics.js/") || url.startsWith("/analytics-next/");
