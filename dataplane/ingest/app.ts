// The ingest app factory: a Fastify instance with the Tracking API, CORS, settings, health and
// metrics. The entrypoint (cli/commands/ingest.ts) connects NATS, builds this, and listens;
// tests build it the same way and use inject() or listen on port 0.
import { randomUUID } from "node:crypto";
import { STATUS_CODES } from "node:http";
import type { Duplex, Readable } from "node:stream";
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyRequest, type onResponseHookHandler } from "fastify";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Registry } from "prom-client";
import type { CompiledConfig } from "../../schema/mod.ts";
import { configMetrics, type ConfigProvider } from "../config/mod.ts";
import type { Logger } from "../logging.ts";
import { EVENTS_STREAM, isNatsConnected, natsConnectedGauge, streamReadiness } from "../nats/mod.ts";
import { KeyedLogInterval } from "../telemetry/mod.ts";
import { opsRoutes } from "../ops/mod.ts";
import { SourceDirectory } from "./auth.ts";
import { BodyBudget } from "./body-budget.ts";
import { parseJsonObject, readBoundedBody } from "./body.ts";
import { IngestError, errors } from "./errors.ts";
import { IngestMetrics } from "./metrics.ts";
import type { RejectReason } from "./accept.ts";
import { resolveIngestOptions, type IngestOptions, type IngestOptionsInput } from "./options.ts";
import { EventPublisher } from "./publish.ts";
import { SourceRateLimits } from "./rate-limit.ts";
import { corsRoutes } from "./routes/cors.ts";
import { BATCH_FIELDS_ALLOWANCE, ENRICHMENT_ALLOWANCE, MESSAGE_PATHS, clientIp, messageRoutes } from "./routes/messages.ts";
import { settingsRoutes } from "./routes/settings.ts";
import { analyticsJsRoutes } from "./routes/analytics-js.ts";
import type { IngestState } from "./state.ts";

export interface IngestAppDeps {
  nc: NatsConnection;
  config: ConfigProvider;
  logger?: Logger;
  metrics?: IngestMetrics;
  /** More registries served on /metrics (dev puts delivery's here). */
  extraRegistries?: Registry[];
  /** Hears every answer that stores nothing, unthrottled (dev's activity lines). */
  activity?: IngestActivity;
}

/**
 * What a watcher hears of what ingest did not store: each message not accepted and each request
 * refused, as they happen. The log says the same at most once per 10 s per kind (an SDK drops a
 * 401 silently, so on a laptop each one is worth a line); accepted messages are not told here,
 * they are in the stream.
 */
export interface IngestActivity {
  notAccepted(event: { source: string; reason: RejectReason; detail: string; messageId?: string }): void;
  refused(event: { route: string; status: number; code: string; message: string }): void;
}

const READINESS_CACHE_MS = 1000;

export async function buildIngestApp(deps: IngestAppDeps, input: IngestOptionsInput = {}): Promise<FastifyInstance> {
  const options = resolveIngestOptions(input);
  const metrics = deps.metrics ?? new IngestMetrics();
  const publisher = new EventPublisher(
    deps.nc,
    { timeoutMs: options.publishTimeoutMs, retryAfterSeconds: options.retryAfterSeconds },
    metrics,
  );
  const jsm = await jetstreamManager(deps.nc, { timeout: 1000, checkAPI: false });

  natsConnectedGauge(metrics.registry, deps.nc);
  warnIfPayloadLimitTooSmall(deps.nc, options, deps.logger);
  configMetrics(metrics.registry, deps.config);
  metrics.readStreamFrom(async () => {
    if (!isNatsConnected(deps.nc)) return undefined;
    const { state, config } = await jsm.streams.info(EVENTS_STREAM);
    return { bytes: state.bytes, maxBytes: config.max_bytes };
  });

  let readiness: { at: number; result: Promise<{ ready: boolean; reason?: string }> } | undefined;
  const ready = () => {
    if (readiness && performance.now() - readiness.at < READINESS_CACHE_MS) return readiness.result;
    const result = !isNatsConnected(deps.nc)
      ? Promise.resolve({ ready: false, reason: deps.nc.isClosed() ? "NATS connection closed" : "NATS disconnected; reconnecting" })
      : streamReadiness(jsm, EVENTS_STREAM);
    readiness = { at: performance.now(), result };
    return result;
  };

  const registry = deps.extraRegistries?.length ? Registry.merge([metrics.registry, ...deps.extraRegistries]) : metrics.registry;
  const state: IngestState = {
    options, metrics, registry, publisher, directory: new SourceDirectory(deps.config.current()), rateLimits: new SourceRateLimits(), bodies: new BodyBudget(options.bodyBytesInFlight), ready,
    repeatedLines: new KeyedLogInterval(REPEATED_LINE_INTERVAL_MS),
    ...(deps.activity ? { activity: deps.activity } : {}),
  };
  const sourcesIn = (config: CompiledConfig) => {
    metrics.sources.set(state.directory.size);
    metrics.sourcesInConfig(config.sources.filter((s) => s.enabled).map((s) => `${s.namespace}/${s.name}`));
  };
  sourcesIn(deps.config.current());
  const unsubscribe = deps.config.subscribe((config) => {
    state.directory = new SourceDirectory(config);
    state.rateLimits.configure(config.sources);
    sourcesIn(config);
  });

  const app: FastifyInstance = Fastify({
    ...(deps.logger ? { loggerInstance: childless(deps.logger) } : { logger: false }),
    trustProxy: options.trustedProxies.length > 0 ? [...options.trustedProxies] : false,
    // Per-request access logs would dominate at SDK rates; rejects and errors are logged instead.
    logController: new LogController({ disableRequestLogging: true }),
    // A caller's (or a proxy's) X-Request-Id names the request in the log lines it causes, and
    // comes back on an error answer; else a UUID, unique across pods and restarts.
    requestIdHeader: false,
    genReqId: (req) => {
      const given = req.headers["x-request-id"];
      return typeof given === "string" && REQUEST_ID.test(given) ? given : randomUUID();
    },
    // Requests that arrive once closing has begun get shutting_down from the hook below, in the
    // catalogue's shape and with Retry-After and CORS headers, which Fastify's own 503 lacks.
    return503OnClosing: false,
    keepAliveTimeout: options.keepAliveTimeoutMs,
    requestTimeout: options.requestTimeoutMs,
    // Node checks requestTimeout on this interval (30 s by default, half the timeout here), and
    // ignores it when headersTimeout (60 s by default) is the longer of the two.
    http: {
      connectionsCheckingInterval: Math.min(30_000, Math.ceil(options.requestTimeoutMs / 4)),
      headersTimeout: Math.min(60_000, options.requestTimeoutMs),
    },
    // Requests Node refuses before Fastify sees them: answered in the catalogue's shape, counted.
    clientErrorHandler: (err, socket) => answerClientError(err, socket, metrics, options.requestTimeoutMs, deps.logger),
    // analytics-java posts to <endpoint>/v1/import/ (its DEFAULT_PATH), which Segment's API accepts;
    // an endpoint given with a trailing slash makes that //v1/import/.
    routerOptions: { ignoreTrailingSlash: true, ignoreDuplicateSlashes: true },
  });

  // Once closing, answers end their connection: a keep-alive connection that goes idle after
  // close() began would otherwise hold the server open until keepAliveTimeout (72 s by default),
  // past Kubernetes' grace period.
  let closing = false;
  app.addHook("preClose", async () => {
    closing = true;
    publisher.stopHolding(); // NATS away at shutdown: 503 now, not at the end of each wait
  });
  app.addHook("onSend", (request, reply, payload, done) => {
    if (closing) reply.header("connection", "close");
    // The client went away after sending its body, while its messages were being stored: the
    // answer is never finished, so no onResponse counts it, and onRequestAbort fires only for a
    // request cut off mid-body. Counted here, once: the route's count never comes.
    if (reply.raw.destroyed && !answeredByNode.has(request.raw.socket)) metrics.countRequest(request.routeOptions.url ?? "unmatched", 499, "client_aborted");
    done(null, payload);
  });
  app.addHook("onClose", async () => {
    unsubscribe();
    publisher.close();
  });
  // Every route counts its answers with a hook of its own that knows the route's URL: reading it
  // per request from request.routeOptions would build a new object each time. The hook takes a
  // callback rather than returning a promise: one less allocation per request.
  app.addHook("onRoute", (route) => {
    const url = route.url;
    const count: onResponseHookHandler = (request, reply, done) => {
      metrics.countRequest(url, reply.statusCode, request.errorCode ?? (reply.statusCode < 400 ? "ok" : "error"));
      done();
    };
    route.onResponse = [...[route.onResponse ?? []].flat(), count];
  });

  // A client that goes away mid-request gets no answer, so onResponse never runs for it. A
  // request cut off by requestTimeout was answered and counted by answerClientError.
  app.addHook("onRequestAbort", async (request) => {
    if (answeredByNode.has(request.raw.socket)) return;
    metrics.countRequest(request.routeOptions.url ?? "unmatched", 499, "client_aborted");
  });

  app.setErrorHandler((err: FastifyError | IngestError, request, reply) => {
    const error = err instanceof IngestError ? err : fromFastifyError(err);
    request.errorCode = error.code;
    // A request to no route that fails before the not-found handler (its body) has no route hook to count it.
    if (request.is404) metrics.countRequest("unmatched", error.statusCode, error.code);
    if (error.code === "storage_unavailable" || error.code === "storage_full") {
      // While NATS is down every request fails alike: one line every 10 s says why and how many
      // more failed (the metrics count each), not a line and a stack per request.
      const held = state.repeatedLines.pass("storage");
      const cause = error.cause instanceof Error ? error.cause.message : undefined;
      if (held !== undefined) request.log.error({ reqId: request.id, code: error.code, cause, moreFailedSinceLastLine: held }, error.message);
    } else if (error.statusCode >= 500) request.log.error({ reqId: request.id, err, code: error.code }, error.message);
    else if (error.code !== "rate_limited") {
      // (A rate-limited request is logged by its route, with the source.)
      const held = state.repeatedLines.pass(`answer ${error.code}`);
      // The client's address (after trusted proxies) finds the SDK sending with a wrong key; as
      // context.ip has it (not "::ffff:203.0.113.7"), or else as it came.
      if (held !== undefined) request.log.info({ reqId: request.id, code: error.code, route: request.routeOptions.url, ip: clientIp(request.ip) ?? request.ip, moreLikeThisSinceLastLine: held }, error.message);
    }
    state.activity?.refused({ route: request.routeOptions.url ?? request.url.split("?")[0]!, status: error.statusCode, code: error.code, message: error.message });
    if (error.retryAfter) reply.header("retry-after", String(error.retryAfter));
    reply.header("x-request-id", request.id);
    if (!request.raw.complete) {
      // A body left unread (corrupt compression, say) would hold the connection until the
      // request timeout. An over-size one is drained instead; if it stalls, the timeout ends it
      // without a second answer.
      if (!error.drainBody) reply.header("connection", "close");
      const socket = request.raw.socket;
      answeredMidBody.add(socket);
      request.raw.once("end", () => answeredMidBody.delete(socket));
    }
    reply.code(error.statusCode).send(error.toJSON());
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split("?")[0]!;
    reply.header("x-request-id", request.id); // as on every other error answer
    // A GET of /v1/track (a browser's address bar, a health check pointed at the wrong path) is a
    // known path with the wrong method: say so, as HTTP asks, rather than that the path is unknown.
    // As the router reads it (it ignores doubled and trailing slashes): POST /v1/track/ is routed.
    const routed = path.replace(/\/{2,}/g, "/").replace(/(.)\/$/, "$1");
    if (MESSAGE_PATHS.has(routed)) {
      metrics.countRequest(routed, 405, "method_not_allowed");
      reply.code(405).header("allow", "POST, OPTIONS").send(errors.methodNotAllowed(request.method, routed).toJSON());
      return;
    }
    metrics.countRequest("unmatched", 404, "not_found");
    reply.code(404).send(errors.notFound(`No route for ${request.method} ${path}`).toJSON());
  });

  // Bodies sent to any other route (none takes one) are still read within the single-message
  // limit, so a large body sent to a wrong path cannot keep a connection busy.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", async (request: FastifyRequest, payload: NodeJS.ReadableStream) =>
    parseJsonObject(await readBoundedBody(payload as Readable, request.headers, options.limits.singleBytes, () => errors.requestTooLarge(options.limits.singleBytes))),
  );

  corsRoutes(app, state);
  // After the CORS hook, so that a browser can read the 503.
  app.addHook("onRequest", (_request, _reply, done) => {
    done(closing ? errors.shuttingDown(options.retryAfterSeconds) : undefined);
  });
  messageRoutes(app, state);
  settingsRoutes(app, state);
  analyticsJsRoutes(app, state);
  opsRoutes(app, state);
  return app;
}

/**
 * The app's logger as Fastify is given it, whose child() is itself: request.log is then the app's
 * logger, not a child per request. A pino child costs ~1 µs (2% of a /v1/track call) for a reqId
 * binding that the few lines logged per request add themselves. (A childLoggerFactory returning
 * the logger did the same, but Fastify checks what an app's own factory returns on every request,
 * seven method lookups through a filter; its default factory, which calls child(), it trusts.)
 */
function childless(logger: Logger): FastifyBaseLogger {
  const own: FastifyBaseLogger = Object.create(logger, { child: { value: () => own } });
  return own;
}

/** Connections answered by answerClientError, whose request (if one had begun) must not count again as aborted. */
const answeredByNode = new WeakSet<object>();
/** Connections whose request was answered before its body had arrived, until it has. */
const answeredMidBody = new WeakSet<object>();

/**
 * Fastify's default handler of Node's clientError, in the catalogue's shape and counted: a
 * request timed out (408), headers over Node's limit (431), or bytes that are not HTTP (400).
 * Nothing of the request was parsed, so the route is "unmatched" and no CORS header is known.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex, metrics: IngestMetrics, timeoutMs: number, log: Logger | undefined): void {
  // A reset connection, one already gone, or a client that closed mid-request (counted as
  // client_aborted if its request had begun): nobody to answer.
  if (err.code === "ECONNRESET" || err.code === "HPE_INVALID_EOF_STATE" || socket.destroyed) {
    socket.destroy();
    return;
  }
  // The request was answered already (a 400 for an over-size body whose rest was being drained,
  // and which stalled): a second answer would follow the first on the connection.
  if (answeredMidBody.has(socket)) {
    socket.destroy();
    return;
  }
  const error = err.code === "ERR_HTTP_REQUEST_TIMEOUT"
    ? errors.requestTimeout(Math.round(timeoutMs / 1000))
    : err.code === "HPE_HEADER_OVERFLOW"
      ? errors.headersTooLarge()
      : errors.malformedRequest();
  answeredByNode.add(socket);
  metrics.countRequest("unmatched", error.statusCode, error.code);
  log?.info({ code: error.code, err: { code: err.code, message: err.message } }, error.message);
  if (socket.writable) {
    const body = JSON.stringify(error.toJSON());
    socket.write(
      `HTTP/1.1 ${error.statusCode} ${STATUS_CODES[error.statusCode]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

function fromFastifyError(err: FastifyError): IngestError {
  if (err.statusCode && err.statusCode < 500) {
    return new IngestError(err.statusCode === 413 ? "request_too_large" : "invalid_body", 400, err.message, { cause: err, drainBody: err.statusCode === 413 });
  }
  return errors.internal(err);
}

/** An X-Request-Id taken as the request's id: printable, and short enough for a log line. */
const REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;

/** At most one line per kind this often for lines said per message or per refused request (IngestState.repeatedLines). */
const REPEATED_LINE_INTERVAL_MS = 10_000;

/**
 * A nats-server whose max_payload is under the largest message ingest stores refuses those
 * messages at every try: 503 storage_unavailable to an SDK that retries the same batch for ever
 * (found by a review). Said once at start, as an error: it is nats-server's config to change.
 */
function warnIfPayloadLimitTooSmall(nc: NatsConnection, options: IngestOptions, log: Logger | undefined): void {
  const maxPayload = nc.info?.max_payload;
  // The largest stored message, and room for its headers (Nats-Msg-Id and the subject's).
  const needed = Math.max(options.limits.singleBytes, options.limits.itemBytes + BATCH_FIELDS_ALLOWANCE) + ENRICHMENT_ALLOWANCE + 1024;
  if (maxPayload !== undefined && maxPayload < needed) {
    log?.error({ maxPayload, needed }, "nats-server's max_payload is smaller than the largest message ingest accepts: such messages get 503 storage_unavailable at every try; raise max_payload in nats-server's config (its default is 1MB)");
  }
}

