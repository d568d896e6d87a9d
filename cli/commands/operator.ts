// `trackhook operator`: the Kubernetes operator, with leader election so replicas can stand by.
import { createLogger } from "../../dataplane/logging.ts";
import { connectNats, natsConnectedGauge } from "../../dataplane/nats/mod.ts";
import { buildOpsServer } from "../../dataplane/ops/mod.ts";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Operator } from "../../operator/mod.ts";
import { isDnsLabel } from "../../schema/mod.ts";
import { UsageError, anyAddress, durationFlag, integerFlag, listFlag, listenOrExplain, natsUrl } from "../args.ts";
import { onShutdown } from "../shutdown.ts";
import type { Command } from "./types.ts";
import { natsAuthHelp } from "./nats-help.ts";

export const operatorCommand: Command = {
  name: "operator",
  summary: "Reconcile Source, WebhookDestination and DeletionRequest resources (Kubernetes)",
  usage: `trackhook operator --nats <url> [--kubeconfig <path>] [options]

  --nats <url>                 NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${natsAuthHelp(31)}
  --kubeconfig <path>          kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config)
  --lease-namespace <ns>       namespace of the leader Lease (default: $POD_NAMESPACE or default)
  --lease-name <name>          name of the leader Lease (default trackhook-operator)
  --lease-duration <dur>       how long a dead leader's lease blocks a standby (default 15s)
  --watch-namespace <ns,...>   reconcile only these namespaces' resources, comma-separated (default: all namespaces)
  --config-replicas <n>        JetStream replicas of the trackhook-config bucket (default 1)
  --resync <dur>               reconcile every object this often regardless of events (default 10m, at least 10s)
  --delivery-health-window <dur>
                               a WebhookDestination's Delivering condition turns False when messages wait
                               this long with none delivered (NoProgress), or one was dead-lettered within
                               it (DeadLettering) (default 5m, at least 10s; 0s: no such condition)
  --allow-private-networks     delivery runs with --allow-private-networks: accept destinations whose URLs
                               reach only private, loopback or cluster-internal addresses (refused otherwise)
  --require-secret-label       read only Secrets labelled trackhook.io/secret=true, so that creating a
                               WebhookDestination does not let one send any Secret of its namespace to a URL
  --port <n>                   port of /healthz, /readyz and /metrics (default 8082)
  --host <addr>                their listen address (default every address, IPv6 and IPv4: ::)
  --log-level <level>          trace, debug, info, warn, error (default info, or TRACKHOOK_LOG_LEVEL)`,
  flags: {
    nats: { type: "string" }, kubeconfig: { type: "string" }, "lease-namespace": { type: "string" },
    "lease-name": { type: "string" }, "lease-duration": { type: "string" }, "config-replicas": { type: "string" }, "watch-namespace": { type: "string" },
    resync: { type: "string" }, "delivery-health-window": { type: "string" }, port: { type: "string" }, host: { type: "string" }, "log-level": { type: "string" },
    "allow-private-networks": { type: "boolean" }, "require-secret-label": { type: "boolean" },
  },
  async run(values) {
    // Loaded here, not at the top: @kubernetes/client-node costs every other command ~50 MB of
    // RSS and ~0.4 s of start-up (measured with `trackhook --help`).
    const { CrdsOutdatedError, Operator, OperatorMetrics, kubeClients, loadKubeConfig, operatorOptions } = await import("../../operator/mod.ts");
    const nats = natsUrl(values);
    const leaseDurationMs = durationFlag("lease-duration", values["lease-duration"] ?? "15s");
    if (leaseDurationMs < 2000) throw new UsageError("--lease-duration must be at least 2s");
    // A resync re-reads every referenced Secret from the API server and lists the config bucket and
    // consumers; events already trigger reconciles, so more often only loads the API server (0s: ~120/s).
    const resyncMs = durationFlag("resync", values.resync ?? "10m");
    if (resyncMs < 10_000) throw new UsageError("--resync must be at least 10s");
    const deliveryHealthWindowMs = durationFlag("delivery-health-window", values["delivery-health-window"] ?? "5m");
    if (deliveryHealthWindowMs > 0 && deliveryHealthWindowMs < 10_000) throw new UsageError("--delivery-health-window must be at least 10s (or 0s: no Delivering condition)");
    // A name that is not a namespace would start an operator that watches nothing and says nothing.
    const watchNamespaces = [...new Set(listFlag(values["watch-namespace"]) ?? [])];
    for (const [flag, namespace] of [...watchNamespaces.map((ns) => ["watch-namespace", ns]), ["lease-namespace", values["lease-namespace"]]] as const) {
      if (namespace && !isDnsLabel(namespace)) {
        throw new UsageError(`--${flag}: "${namespace}" is not a namespace name (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)`);
      }
    }
    const options = operatorOptions({
      ...(values["lease-namespace"] ? { leaseNamespace: values["lease-namespace"] } : {}),
      ...(values["lease-name"] ? { leaseName: values["lease-name"] } : {}),
      // client-go's proportions: renew deadline 2/3 of the lease, retries every 2/15 of it.
      leaseDurationMs,
      renewDeadlineMs: Math.round((leaseDurationMs * 2) / 3),
      retryPeriodMs: Math.round((leaseDurationMs * 2) / 15),
      resyncMs,
      deliveryHealthWindowMs,
      watchNamespaces,
      configReplicas: integerFlag("config-replicas", values["config-replicas"] ?? "1", 1, 5),
      allowPrivateNetworks: Boolean(values["allow-private-networks"] as unknown),
      requireSecretLabel: Boolean(values["require-secret-label"] as unknown),
    });
    const port = integerFlag("port", values.port ?? "8082", 0, 65535);
    const log = createLogger({ level: values["log-level"], name: "operator" });
    let kube;
    try {
      kube = kubeClients(loadKubeConfig(values.kubeconfig));
    } catch (err) {
      throw new UsageError(`cannot load the Kubernetes config: ${(err as Error).message}`);
    }
    // Health first: an operator waiting for NATS is alive, just not ready yet.
    const metrics = new OperatorMetrics();
    const running: { nc?: NatsConnection; operator?: Operator } = {};
    const ops = buildOpsServer({
      registry: metrics.registry,
      ready: async () => running.operator?.readiness() ?? { ready: false, reason: "starting: waiting for NATS" },
    });
    const address = await listenOrExplain(ops, values.host ?? (await anyAddress()), port);
    log.info({ address }, "operator health, readiness and metrics on this address");
    onShutdown(log, async () => {
      await ops.close();
      await running.operator?.stop(); // finishes running reconciles and hands the lease over
      await running.nc?.drain();
    });
    natsConnectedGauge(metrics.registry, () => running.nc);
    const nc = (running.nc = await connectNats({ servers: nats, name: "trackhook-operator", log, component: "operator" }));
    const operator = (running.operator = new Operator({ kube, nc, log, metrics }, options));
    // Losing the lease means another replica may act now: stop at once, as controller-runtime does.
    try {
      await operator.run(() => process.exit(1));
    } catch (err) {
      if (!(err instanceof CrdsOutdatedError)) throw err;
      // Not a crash to debug: say what to do, in the log and on stderr, and let the pod restart.
      log.error({ missing: err.missing }, err.message);
      throw new UsageError(err.message);
    }
  },
};
