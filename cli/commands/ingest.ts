// `trackhook ingest`: the Tracking API server.
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import Fastify, { type FastifyInstance } from "fastify";
import { Registry } from "prom-client";
import type { ConfigProvider } from "../../dataplane/config/mod.ts";
import { IngestMetrics, buildIngestApp, ingestErrors, type IngestActivity, type IngestOptionsInput } from "../../dataplane/ingest/mod.ts";
import { OPS_PATHS, opsRoutes } from "../../dataplane/ops/mod.ts";
import { createLogger, type Logger } from "../../dataplane/logging.ts";
import { EVENTS_STREAM, StreamGuard, connectNats, ensureStream, eventsStreamConfig, keptSettings, natsConnectedGauge, patiently, type EventsStreamSettings } from "../../dataplane/nats/mod.ts";
import { anyAddress, integerFlag, listenOrExplain, natsUrl } from "../args.ts";
import { onShutdown } from "../shutdown.ts";
import { configFrom, configSourceFlags, configSourceHelp, openConfig, openConfigFiles } from "./config-source.ts";
import { ingestFlags, ingestFlagsHelp, ingestOptions, streamSettings } from "./shared-flags.ts";
import type { Command } from "./types.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";

export interface RunningIngest {
  url: string;
  close(): Promise<void>;
}

/**
 * Makes TRACKHOOK_EVENTS, or brings its settings to the flags', waiting out a JetStream slow to
 * answer (patiently). Returns the manager the stream guard keeps using.
 */
export function ensureEventsStream(nc: NatsConnection, settings: EventsStreamSettings, log: Logger): Promise<JetStreamManager> {
  return patiently(`making stream ${EVENTS_STREAM}`, async () => {
    const jsm = await jetstreamManager(nc);
    await ensureStream(
      jsm,
      eventsStreamConfig(settings),
      (changes) => log.warn({ stream: EVENTS_STREAM, changes }, "changing the events stream's settings to this process's flags (durations in ns; a shorter max_age drops older messages at once)"),
      keptSettings(settings.defaulted),
    );
    return jsm;
  }, log);
}

/** Builds the app and listens, the events stream made (`jsm`) or made here. Shared by `ingest` and `dev`. */
export async function startIngest(args: {
  nc: NatsConnection;
  config: ConfigProvider;
  log: Logger;
  host: string;
  port: number;
  stream: EventsStreamSettings;
  /** The manager of an events stream already made by ensureEventsStream. */
  jsm?: JetStreamManager;
  options: IngestOptionsInput;
  /** Its metrics, when made by the caller (dev shares a counter of them with delivery). */
  metrics?: IngestMetrics;
  /** More registries for /metrics (dev serves delivery's too). */
  extraRegistries?: Registry[];
  activity?: IngestActivity;
}): Promise<RunningIngest> {
  const jsm = args.jsm ?? (await ensureEventsStream(args.nc, args.stream, args.log));
  const metrics = args.metrics ?? new IngestMetrics();
  const app = await buildIngestApp({ nc: args.nc, config: args.config, logger: args.log, metrics, ...(args.extraRegistries ? { extraRegistries: args.extraRegistries } : {}), ...(args.activity ? { activity: args.activity } : {}) }, args.options);
  const address = await listenOrExplain(app, args.host, args.port);
  const guard = new StreamGuard(args.nc, jsm, [eventsStreamConfig(args.stream)], args.log, { recreated: metrics.streamsRecreated });
  args.log.info({ address, sources: args.config.current().sources.length }, "ingest listening");
  return {
    url: address,
    close: () => {
      guard.stop();
      return app.close();
    },
  };
}

export const ingestCommand: Command = {
  name: "ingest",
  summary: "Run the Segment-compatible Tracking API, storing messages in JetStream",
  usage: `trackhook ingest (--config <file|dir> | --config-from nats) --nats <url> [--port <n>] [options]

  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}${configSourceHelp}${ingestFlagsHelp}`,
  flags: { ...ingestFlags, ...configSourceFlags, nats: { type: "string" } },
  async run(values) {
    const from = configFrom(values);
    const nats = natsUrl(values);
    const log = createLogger({ level: values["log-level"], name: "ingest" });
    const stream = streamSettings(values);
    const options = ingestOptions(values);
    const port = integerFlag("port", values.port ?? "8080", 0, 65535); // before waiting on NATS
    const files = openConfigFiles(from, log, "sources"); // invalid config fails here, before connecting
    const host = values.host ?? (await anyAddress());
    // Health first, as deliver and the operator do: a pod waiting for NATS or the config bucket
    // is alive (no restart loop however long the wait), not ready, and says what it waits for.
    // The Tracking API takes the port over once it can store messages.
    const running: { waiting?: FastifyInstance; nc?: NatsConnection; config?: ConfigProvider; ingest?: RunningIngest } = {};
    let waitingFor = "NATS";
    const waiting = (running.waiting = waitingServer(() => waitingFor, () => running.nc));
    const address = new URL(await listenOrExplain(waiting, host, port));
    log.debug({ address: address.origin }, "health and metrics served; ready once NATS and the config are");
    onShutdown(log, async () => {
      await running.waiting?.close();
      await running.ingest?.close(); // stops accepting, waits for in-flight requests and their publishes
      running.config?.close();
      await running.nc?.drain();
    });
    const nc = (running.nc = await connectNats({ servers: nats, name: "trackhook-ingest", log, component: "ingest" }));
    waitingFor = "the trackhook-config bucket";
    const config = (running.config = await openConfig(files, nc, log, "sources"));
    // Still answering /healthz meanwhile: a NATS cluster electing can take a while to make it.
    waitingFor = `the ${EVENTS_STREAM} stream`;
    const jsm = await ensureEventsStream(nc, stream, log);
    await waiting.close();
    running.waiting = undefined;
    running.ingest = await startIngest({ nc, config, log, stream, jsm, options, host, port: Number(address.port) });
  },
};

/**
 * What answers on the ingest's port until it can store messages: /healthz 200, /readyz 503 with
 * what it waits for, and 503 storage_unavailable (which SDKs retry) for the Tracking API.
 */
export function waitingServer(waitingFor: () => string, nc: () => NatsConnection | undefined): FastifyInstance {
  const registry = new Registry();
  natsConnectedGauge(registry, nc);
  // While it closes for the Tracking API to take the port, a request on a connection already
  // open gets the same storage_unavailable, not Fastify's 503 without the catalogue's success and
  // code (found by a proxy review); Fastify still closes those connections after the answer.
  const app = Fastify({ logger: false, return503OnClosing: false });
  opsRoutes(app, { registry, ready: async () => ({ ready: false, reason: `starting: waiting for ${waitingFor()}` }) });
  // Before any body is read (gzip, a malformed or an oversized one would otherwise be a 4xx,
  // which SDKs do not retry).
  app.addHook("onRequest", (request, reply, done) => {
    if (OPS_PATHS.has(request.url.split("?")[0]!)) return done();
    const error = ingestErrors.storageUnavailable(5);
    void reply
      .code(error.statusCode)
      .header("retry-after", "5")
      .header("connection", "close")
      .send({ success: false, code: error.code, message: `${error.message} (starting: waiting for ${waitingFor()})` });
  });
  return app;
}
