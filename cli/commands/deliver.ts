// `trackhook deliver`: delivery workers for the destinations in the config.
import { configMetrics, type ConfigProvider } from "../../dataplane/config/mod.ts";
import type { CompiledConfig } from "../../schema/mod.ts";
import { configFrom, configSourceFlags, configSourceHelp, openConfig, openConfigFiles } from "./config-source.ts";
import {
  DEFAULT_PROCESS_MAX_IN_FLIGHT, DeliveryMetrics, DeliveryService, InvalidEgressProxyError, WebhookSender, egressProxy, redactProxyUrl, redactUrl, urlReachesOnlyPrivate,
  type DeliveryActivity, type EgressProxy,
} from "../../dataplane/delivery/mod.ts";
import { createLogger, type Logger } from "../../dataplane/logging.ts";
import { DEFAULT_SIDE_STREAM, connectNats, natsConnectedGauge, type SideStreamSettings } from "../../dataplane/nats/mod.ts";
import type { NatsConnection } from "@nats-io/transport-node";
import { VERSION } from "../../dataplane/version.ts";
import { buildOpsServer } from "../../dataplane/ops/mod.ts";
import { UsageError, anyAddress, integerFlag, listFlag, listenOrExplain, natsUrl, parseBytes, settingsLeftOut } from "../args.ts";
import { onShutdown } from "../shutdown.ts";
import type { Command } from "./types.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";

export interface RunningDelivery {
  service: DeliveryService;
  metrics: DeliveryMetrics;
  close(): Promise<void>;
}

/** Starts delivery; shared by `deliver` and `dev`. */
export async function startDelivery(args: {
  nc: NatsConnection;
  config: ConfigProvider;
  log: Logger;
  allowPrivateNetworks: boolean;
  maxInFlight?: number;
  metrics?: DeliveryMetrics;
  sideStreams?: SideStreamSettings;
  proxy?: EgressProxy;
  /** The config comes from --config files (DeliveryServiceDeps.configFromFiles). */
  configFromFiles?: boolean;
  activity?: DeliveryActivity;
  /** Given how to stop delivery while it is still starting (its destinations' consumers being made). */
  starting?: (stop: () => Promise<void>) => void;
}): Promise<RunningDelivery> {
  if (args.proxy) {
    args.log.info({ proxy: redactProxyUrl(args.proxy.url), noProxy: args.proxy.noProxy }, "webhooks go through the egress proxy (those to the noProxy hosts directly)");
  }
  if (args.allowPrivateNetworks) {
    args.log.warn("private networks are ALLOWED: webhooks may reach loopback, private and metadata addresses (fine on a laptop, not in production)");
  } else {
    warnOfPrivateUrls(args.config, args.log);
  }
  const sender = new WebhookSender({ allowPrivateNetworks: args.allowPrivateNetworks, userAgent: `trackhook/${VERSION}`, ...(args.proxy ? { proxy: args.proxy } : {}) });
  const metrics = args.metrics ?? new DeliveryMetrics();
  let service: DeliveryService | undefined;
  const close = async () => {
    await service?.stop();
    await sender.close();
  };
  service = await DeliveryService.start({
    nc: args.nc, config: args.config, sender, log: args.log, metrics,
    ...(args.maxInFlight ? { maxInFlight: args.maxInFlight } : {}),
    ...(args.sideStreams ? { dlqStream: args.sideStreams, attemptsStream: args.sideStreams } : {}),
    ...(args.configFromFiles ? { configFromFiles: true } : {}),
    ...(args.activity ? { activity: args.activity } : {}),
    starting: (starting) => {
      service = starting;
      args.starting?.(close);
    },
  });
  return { service, metrics, close };
}

/**
 * Says at start (and when the config changes) which destinations name a URL that delivery will
 * refuse: otherwise the first sign is every message dead-lettered as private_address_refused.
 */
function warnOfPrivateUrls(config: ConfigProvider, log: Logger): void {
  const told = new Set<string>();
  const check = (current: CompiledConfig) => {
    for (const destination of current.destinations) {
      for (const url of destination.urls) {
        const key = `${destination.namespace}/${destination.name} ${url}`;
        const parsed = URL.parse(url);
        if (told.has(key) || !parsed || !urlReachesOnlyPrivate(parsed)) continue;
        told.add(key);
        log.warn(
          { destination: `${destination.namespace}/${destination.name}`, url: redactUrl(url) },
          "this webhook URL reaches only a private address, which delivery refuses (private_address_refused): run deliver with --allow-private-networks if it is meant",
        );
      }
    }
  };
  check(config.current());
  config.subscribe(check);
}

/** The egress proxy flags, shared by `deliver` and `dev`. */
export const egressProxyFlags = { "egress-proxy": { type: "string" }, "egress-no-proxy": { type: "string" } } as const;
export const EGRESS_PROXY_HELP = `
  --egress-proxy <url>       send webhooks through this HTTP proxy (http://[user:password@]host:port;
                             or TRACKHOOK_EGRESS_PROXY); HTTPS_PROXY is not read
  --egress-no-proxy <list>   hosts reached directly, comma-separated: host, .domain, *.domain,
                             host:port, IP (or TRACKHOOK_EGRESS_NO_PROXY)`;

/** --egress-proxy and --egress-no-proxy (or their environment variables), checked at start. */
export function egressProxyOf(values: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): EgressProxy | undefined {
  const flag = (name: string, variable: string) => (values[name] as string | undefined) ?? (env[variable] || undefined);
  const url = flag("egress-proxy", "TRACKHOOK_EGRESS_PROXY");
  const noProxy = listFlag(flag("egress-no-proxy", "TRACKHOOK_EGRESS_NO_PROXY"));
  if (url === undefined) {
    if (noProxy !== undefined && noProxy.length > 0) throw new UsageError("--egress-no-proxy lists hosts that bypass --egress-proxy, which is not given");
    return undefined;
  }
  try {
    return egressProxy(url, noProxy);
  } catch (err) {
    if (err instanceof InvalidEgressProxyError) throw new UsageError(err.message);
    throw err;
  }
}

export const deliverCommand: Command = {
  name: "deliver",
  summary: "Deliver stored messages to the webhook URLs of each WebhookDestination",
  usage: `trackhook deliver (--config <file|dir> | --config-from nats) --nats <url> [--allow-private-networks]
${configSourceHelp}
  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}
  --allow-private-networks   let webhooks reach loopback, private, link-local and metadata addresses${EGRESS_PROXY_HELP}
  --max-in-flight <n>        messages in delivery at once in this process, all destinations (default 1000)
  --stream-replicas <n>      JetStream replicas of TRACKHOOK_DLQ and TRACKHOOK_ATTEMPTS (default 1)
  --stream-max-bytes <size>  disk budget of each of those two streams (default 1GiB)
  --dead-letters-per-destination <n>
                             dead letters TRACKHOOK_DLQ keeps per destination; past it that
                             destination's are refused, not everybody's (default 0: no limit)
  --port <n>                 port of /healthz, /readyz and /metrics (default 8081)
  --host <addr>              their listen address (default every address, IPv6 and IPv4: ::)
  --log-level <level>        trace, debug, info, warn, error (default info, or TRACKHOOK_LOG_LEVEL)`,
  flags: {
    ...configSourceFlags, ...egressProxyFlags, nats: { type: "string" }, "allow-private-networks": { type: "boolean" },
    port: { type: "string" }, host: { type: "string" }, "log-level": { type: "string" }, "max-in-flight": { type: "string" },
    "stream-replicas": { type: "string" }, "stream-max-bytes": { type: "string" }, "dead-letters-per-destination": { type: "string" },
  },
  async run(values) {
    const from = configFrom(values);
    const nats = natsUrl(values);
    const port = integerFlag("port", values.port ?? "8081", 0, 65535);
    const maxInFlight = integerFlag("max-in-flight", values["max-in-flight"] ?? String(DEFAULT_PROCESS_MAX_IN_FLIGHT), 1, 100_000);
    const sideStreams = {
      replicas: integerFlag("stream-replicas", values["stream-replicas"] ?? String(DEFAULT_SIDE_STREAM.replicas), 1, 5),
      maxBytes: values["stream-max-bytes"] === undefined ? DEFAULT_SIDE_STREAM.maxBytes : parseBytes("stream-max-bytes", values["stream-max-bytes"]),
      maxPerDestination: integerFlag("dead-letters-per-destination", values["dead-letters-per-destination"] ?? "0", 0, 1_000_000_000),
      defaulted: settingsLeftOut(values, { replicas: "stream-replicas", maxBytes: "stream-max-bytes", maxPerDestination: "dead-letters-per-destination" }),
    };
    const proxy = egressProxyOf(values);
    const log = createLogger({ level: values["log-level"], name: "deliver" });
    const files = openConfigFiles(from, log, "destinations"); // invalid config fails here, before connecting
    // Health first: a pod waiting for NATS or the config bucket is alive, just not ready yet.
    const metrics = new DeliveryMetrics();
    // Filled in as start-up proceeds; the probes and the shutdown read what is there.
    const running: { nc?: NatsConnection; config?: ConfigProvider; delivery?: RunningDelivery; stopDelivery?: () => Promise<void> } = {};
    let waitingFor = "NATS";
    const ops = buildOpsServer({
      registry: metrics.registry,
      ready: async () => (running.delivery ? running.delivery.service.ready() : { ready: false, reason: `starting: waiting for ${waitingFor}` }),
    });
    const address = await listenOrExplain(ops, values.host ?? (await anyAddress()), port);
    log.debug({ address }, "health and metrics served; ready once delivery runs");
    let stopping = false;
    onShutdown(log, async () => {
      stopping = true;
      await ops.close();
      // Drains in-flight deliveries before exit, also while the destinations are still starting.
      await running.stopDelivery?.();
      running.config?.close();
      await running.nc?.drain();
    });
    natsConnectedGauge(metrics.registry, () => running.nc);
    try {
      const nc = (running.nc = await connectNats({ servers: nats, name: "trackhook-deliver", log, component: "delivery" }));
      waitingFor = from.kind === "nats" ? "the trackhook-config bucket" : "the events stream";
      const config = (running.config = await openConfig(files, nc, log, "destinations"));
      configMetrics(metrics.registry, config);
      waitingFor = "the events stream";
      const delivery = (running.delivery = await startDelivery({ nc, config, log, maxInFlight, metrics, sideStreams, configFromFiles: from.kind !== "nats", allowPrivateNetworks: Boolean(values["allow-private-networks"] as unknown), ...(proxy ? { proxy } : {}), starting: (stop) => (running.stopDelivery = stop) }));
      if (!stopping) log.info({ address, destinations: delivery.service.destinations }, "delivery running (health, readiness and metrics on this address)");
    } catch (err) {
      // Stopped while starting: what was waiting on NATS fails as its connection drains, and the
      // shutdown exits 0 (found by a review: exit 1 and a stack trace for a SIGTERM at start).
      if (!stopping) throw err;
      log.warn({ err: (err as Error).message }, "delivery did not finish starting before the shutdown");
    }
  },
};
