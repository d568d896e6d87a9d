// Test harness for the operator: a namespace of its own on the run's API server, a nats-server,
// and the data plane configured the cluster way — ingest and delivery following the
// trackhook-config bucket — plus a webhook receiver. The operator runs in-process (`useOperator`)
// or as `trackhook operator` child processes (`spawnOperator`), for kill and failover tests.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { afterAll, afterEach, beforeAll } from "vitest";
import { KvConfigProvider, ensureConfigBucket } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender } from "../../dataplane/delivery/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { Operator, kubeClients, operatorOptions, type OperatorOptions } from "../../operator/mod.ts";
import { GROUP, VERSION } from "../../schema/mod.ts";
import { repoRoot, useControlPlane, type ClusterAccess } from "./control-plane.ts";
import { startIngest, type IngestHarness } from "./ingest.ts";
import { startNats, type NatsHarness } from "./nats.ts";
import { startReceiver, type Receiver } from "./receiver.ts";
import { freePort } from "./ports.ts";

// The operator's and the data plane's log: printed as it goes with TRACKHOOK_TEST_LOG=<level>;
// otherwise its last lines at debug level are kept and printed when a test fails, so a failure
// seen once in CI can be read.
const recentLines: string[] = [];
const RECENT_LINES = 400;
const log = process.env.TRACKHOOK_TEST_LOG
  ? createLogger({ level: process.env.TRACKHOOK_TEST_LOG })
  : createLogger({ level: "debug", destination: { write: (line) => void (recentLines.push(line) > RECENT_LINES && recentLines.shift()) } });
const PLURAL = { Source: "sources", WebhookDestination: "webhookdestinations", DeletionRequest: "deletionrequests" } as const;
export type Kind = keyof typeof PLURAL;

export interface KubeResource {
  metadata: { name: string; generation?: number; finalizers?: string[]; uid: string };
  spec: Record<string, unknown>;
  status?: {
    observedGeneration?: number;
    conditions?: Array<{ type: string; status: string; reason: string; message: string }>;
    [field: string]: unknown;
  };
}

export interface OperatorEnv {
  readonly cluster: ClusterAccess;
  readonly namespace: string;
  readonly nats: NatsHarness;
  readonly ingest: IngestHarness;
  readonly receiver: Receiver;
  readonly delivery: DeliveryService;
  /** kubectl apply of YAML documents into the test's namespace. */
  apply(yaml: string): Promise<void>;
  get(kind: Kind, name: string): Promise<KubeResource | undefined>;
  /** Waits until Ready has this status (and observedGeneration is current); returns the object. */
  waitReady(kind: Kind, name: string, status?: "True" | "False", timeoutMs?: number): Promise<KubeResource>;
  waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs?: number): Promise<T>;
  /** Stops delivery, runs `meanwhile`, and starts delivery again (a deliver pod down for a while). */
  restartDelivery(meanwhile: () => Promise<void>): Promise<void>;
}

/** Everything but the operator; `beforeAll`/`afterAll` of the calling file. */
export function useOperatorEnv(prefix: string): OperatorEnv {
  const cluster = useControlPlane();
  let namespace = "";
  let nats: NatsHarness | undefined;
  let ingest: IngestHarness | undefined;
  let receiver: Receiver | undefined;
  let delivery: DeliveryService | undefined;
  const providers: KvConfigProvider[] = [];
  const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "trackhook/test" });
  const custom = cluster.kubeConfig().makeApiClient(CustomObjectsApi);

  afterEach(({ task }) => {
    if (task.result?.state === "fail" && recentLines.length > 0) {
      process.stderr.write(`--- the last ${recentLines.length} log lines of the operator and data plane (${task.name}):\n${recentLines.join("")}---\n`);
    }
    recentLines.length = 0;
  });
  beforeAll(async () => {
    namespace = await cluster.randomNamespace(prefix);
    nats = await startNats();
    // Ingest creates the events stream; the data plane waits for the bucket the operator creates.
    const ingestConfig = KvConfigProvider.start(await nats.connect(), log, { retryMs: 100 });
    const deliveryConfig = KvConfigProvider.start(await nats.connect(), log, { retryMs: 100 });
    await ensureConfigBucket(nats.nc); // the operator's job, done here so both can start in any order
    providers.push(await ingestConfig, await deliveryConfig);
    ingest = await startIngest(nats, { config: providers[0]! });
    receiver = await startReceiver();
    delivery = await startDelivery();
  });
  const startDelivery = async () => DeliveryService.start({ nc: await nats!.connect(), config: providers[1]!, sender, log, metrics: new DeliveryMetrics({ defaultMetrics: false }) });
  afterAll(async () => {
    await delivery?.stop();
    await sender.close();
    for (const p of providers) p.close();
    await receiver?.close();
    await ingest?.close();
    await nats?.stop();
  });

  const env: OperatorEnv = {
    cluster,
    get namespace() { return namespace; },
    get nats() { return nats!; },
    get ingest() { return ingest!; },
    get receiver() { return receiver!; },
    get delivery() { return delivery!; },
    async restartDelivery(meanwhile) {
      await delivery?.stop();
      delivery = undefined;
      await meanwhile();
      delivery = await startDelivery();
    },
    async apply(yaml) {
      await cluster.kubectlOk(["apply", "-n", namespace, "-f", "-"], { input: yaml });
    },
    async get(kind, name) {
      try {
        return (await custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PLURAL[kind], name })) as KubeResource;
      } catch (err) {
        if ((err as { code?: number }).code === 404) return undefined;
        throw err;
      }
    },
    async waitReady(kind, name, status = "True", timeoutMs = 15_000) {
      return env.waitFor(`${kind} ${name} Ready=${status}`, async () => {
        const object = await env.get(kind, name);
        const ready = object?.status?.conditions?.find((c) => c.type === "Ready");
        return ready?.status === status && object!.status!.observedGeneration === object!.metadata.generation ? object : undefined;
      }, timeoutMs);
    },
    async waitFor(what, probe, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const value = await probe();
        if (value !== undefined && value !== false) return value as never;
        if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
  return env;
}

/** An in-process operator for the env's namespace, running (leading and synced) when this resolves. */
export async function startOperator(
  env: OperatorEnv,
  options: Partial<Pick<OperatorOptions, "requireSecretLabel" | "watchNamespaces" | "leaseName" | "deliveryHealthWindowMs">> = {},
  /** Sees (and may wrap) the operator's API clients before it starts. */
  withKube?: (kube: ReturnType<typeof kubeClients>) => void,
): Promise<Operator> {
  const kube = kubeClients(env.cluster.kubeConfig());
  withKube?.(kube);
  const operator = new Operator(
    { kube, nc: await env.nats.connect(), log },
    // Private networks allowed, as for the delivery beside it: the test receivers are on loopback.
    operatorOptions({ watchNamespaces: [env.namespace], leaseNamespace: env.namespace, leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2000, allowPrivateNetworks: true, ...options }),
  );
  await operator.run((reason) => {
    throw new Error(`the test operator lost its lease: ${reason}`);
  });
  return operator;
}

/** An in-process operator for the env's namespace, started in beforeAll, stopped in afterAll. */
export function useOperator(env: OperatorEnv, options: Parameters<typeof startOperator>[1] = {}): { readonly operator: Operator } {
  let operator: Operator | undefined;
  beforeAll(async () => {
    operator = await startOperator(env, options);
  });
  afterAll(async () => {
    await operator?.stop();
  });
  return { get operator() { return operator!; } };
}

export interface OperatorProcess {
  child: ChildProcess;
  metricsUrl: string;
  output(): string;
  /** SIGKILL: no lease release, no clean shutdown. */
  kill(): Promise<void>;
  stop(): Promise<void>;
  metric(name: string): Promise<number | undefined>;
}

/**
 * `trackhook operator` as a child process, watching the env's namespace; with
 * `--allow-private-networks` unless `allowPrivateNetworks` is false (the test receivers are on loopback).
 */
export async function spawnOperator(env: OperatorEnv, options: { leaseDuration?: string; allowPrivateNetworks?: boolean; resync?: string; logLevel?: string } = {}): Promise<OperatorProcess> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [join(repoRoot, "cli", "main.ts"), "operator", "--nats", env.nats.server.url, "--kubeconfig", env.cluster.kubeconfigPath,
      "--watch-namespace", env.namespace, "--lease-namespace", env.namespace, "--lease-duration", options.leaseDuration ?? "6s",
      "--port", String(port), "--host", "127.0.0.1", "--log-level", options.logLevel ?? "info",
      ...(options.allowPrivateNetworks === false ? [] : ["--allow-private-networks"]), ...(options.resync ? ["--resync", options.resync] : [])],
    { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const metricsUrl = `http://127.0.0.1:${port}/metrics`;
  const proc: OperatorProcess = {
    child,
    metricsUrl,
    output: () => output,
    async kill() {
      child.kill("SIGKILL");
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
    async metric(name) {
      try {
        const text = await (await fetch(metricsUrl)).text();
        const line = text.split("\n").find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
        return line === undefined ? undefined : Number(line.split(" ").pop());
      } catch {
        return undefined;
      }
    },
  };
  await env.waitFor("the operator's /metrics", () => proc.metric("trackhook_operator_leader"), 20_000).catch((err: Error) => {
    throw new Error(`${err.message}\n${output}`);
  });
  return proc;
}

