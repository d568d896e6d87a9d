// GET /v1/projects/<writeKey>/settings: the CDN settings analytics.js (analytics-next) loads at
// start. Pointing its cdnURL at trackhook makes the browser SDK send here, with no legacy
// destinations loaded and SDK metrics off (they would go to Segment).
import type { FastifyInstance, FastifyRequest } from "fastify";
import { errors } from "../errors.ts";
import type { IngestState } from "../state.ts";

export function settingsRoutes(app: FastifyInstance, state: IngestState): void {
  app.get<{ Params: { writeKey: string } }>("/v1/projects/:writeKey/settings", async (request, reply) => {
    if (!state.directory.find(request.params.writeKey)) throw errors.notFound("Unknown write key");
    const { host, protocol } = publicBase(state, request);
    // Without --public-url the answer depends on the Host header, which a client controls: a
    // shared cache must not hand one client's answer to another.
    reply.header("cache-control", state.options.publicUrl ? "public, max-age=60" : "private, max-age=60");
    return {
      integrations: {
        "Segment.io": {
          apiKey: request.params.writeKey,
          apiHost: `${host}/v1`,
          protocol,
          unbundledIntegrations: [],
          addBundledMetadata: true,
          maybeBundledConfigIds: {},
        },
      },
      plan: {
        track: { __default: { enabled: true, integrations: {} } },
        identify: { __default: { enabled: true } },
        group: { __default: { enabled: true } },
      },
      edgeFunction: {},
      analyticsNextEnabled: true,
      middlewareSettings: {},
      enabledMiddleware: {},
      metrics: { sampleRate: 0 },
      legacyVideoPluginsEnabled: false,
      remotePlugins: [],
    };
  });
}

function publicBase(state: IngestState, request: FastifyRequest): { host: string; protocol: string } {
  if (state.options.publicUrl) {
    const url = new URL(state.options.publicUrl);
    return { host: url.host + url.pathname.replace(/\/$/, ""), protocol: url.protocol.replace(":", "") };
  }
  // Behind a TLS-terminating ingress the ingest sees plain HTTP; the proxy's X-Forwarded-Proto
  // says what the browser used. Unlike X-Forwarded-For it is taken from any peer, as Host is:
  // the answer goes back to that caller only (privately cached), so a false one misleads no one else.
  const forwarded = String(request.headers["x-forwarded-proto"] ?? "").split(",")[0]!.trim().toLowerCase();
  return { host: request.host, protocol: forwarded === "https" || forwarded === "http" ? forwarded : request.protocol };
}
