// `trackhook ingest`: the Tracking API server.
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Registry } from "prom-client";
import type { ConfigProvider } from "../../dataplane/config/mod.ts";
import { buildIngestApp, type IngestOptionsInput } from "../../dataplane/ingest/mod.ts";
import { createLogger, type Logger } from "../../dataplane/logging.ts";
import { EVENTS_STREAM, connectNats, ensureStream, eventsStreamConfig, type EventsStreamSettings } from "../../dataplane/nats/mod.ts";
import { integerFlag, listenOrExplain, natsUrl } from "../args.ts";
import { onShutdown } from "../shutdown.ts";
import { configFrom, configSourceFlags, configSourceHelp, openConfig, openConfigFiles } from "./config-source.ts";
import { ingestFlags, ingestFlagsHelp, ingestOptions, streamSettings } from "./shared-flags.ts";
import type { Command } from "./types.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";

export interface RunningIngest {
  url: string;
  close(): Promise<void>;
}

/** Ensures the stream, builds the app and listens. Shared by `ingest` and `dev`. */
export async function startIngest(args: {
  nc: NatsConnection;
  config: ConfigProvider;
  log: Logger;
  host: string;
  port: number;
  stream: EventsStreamSettings;
  options: IngestOptionsInput;
  /** More registries for /metrics (dev serves delivery's too). */
  extraRegistries?: Registry[];
}): Promise<RunningIngest> {
  const jsm = await jetstreamManager(args.nc);
  await ensureStream(jsm, eventsStreamConfig(args.stream), (changes) =>
    args.log.warn({ stream: EVENTS_STREAM, changes }, "changing the events stream's settings to this process's flags (durations in ns; a shorter max_age drops older messages at once)"),
  );
  const app = await buildIngestApp({ nc: args.nc, config: args.config, logger: args.log, ...(args.extraRegistries ? { extraRegistries: args.extraRegistries } : {}) }, args.options);
  const address = await listenOrExplain(app, args.host, args.port);
  args.log.info({ address, sources: args.config.current().sources.length }, "ingest listening");
  return { url: address, close: () => app.close() };
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
    const files = openConfigFiles(from, log); // invalid config fails here, before connecting
    const nc = await connectNats({ servers: nats, name: "trackhook-ingest", log, component: "ingest" });
    const config = await openConfig(files, nc, log, "sources");
    const ingest = await startIngest({
      nc, config, log, stream, options,
      host: values.host ?? "0.0.0.0",
      port,
    });
    onShutdown(log, async () => {
      await ingest.close(); // stops accepting, waits for in-flight requests and their publishes
      config.close();
      await nc.drain();
    });
  },
};
