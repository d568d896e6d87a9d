// The chart's pods, run as processes: the closest this machine gets to test/e2e/kind/run.sh
// without a container engine.
//
// - The image: the final stage of the Dockerfile is laid out in a temporary directory, as it
//   copies it (the `deps` stage's `npm ci --omit=dev ...` into node_modules, the build's dist/,
//   package.json), so every component must run with production dependencies only. Its ENV and
//   ENTRYPOINT (minus tini) start each process, with that directory as the WORKDIR.
// - The pods: `helm template` of charts/trackhook (default values, NATS at a local nats-server,
//   the operator limited to this file's namespace, private networks allowed for the loopback
//   receiver). Each Deployment's container runs with its args and env as rendered: envFrom and
//   configMapKeyRef resolved from the rendered ConfigMap, downward-API fields from a made-up pod.
//   Only the listen address is rewritten (see `rewritePorts`).
// - The operator runs as its pod would: the chart's ServiceAccount, Role and RoleBinding are
//   applied and it authenticates with that ServiceAccount's token, so the chart's RBAC is what it
//   gets (a kubeconfig in KUBECONFIG stands in for the in-cluster config files).
// - Then as a user: kubectl apply a Source and a WebhookDestination with their Secrets, probe every
//   process on its rendered probe paths, send events with @segment/analytics-node, and check the
//   receiver got them signed; finally the kubelet's part of a shutdown (ingest's preStop, then
//   SIGTERM) and each process exits 0 within its terminationGracePeriodSeconds.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { cpSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { promisify } from "node:util";
import { Analytics } from "@segment/analytics-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { EVENTS_STREAM, consumerName } from "../../dataplane/nats/mod.ts";
import { podSpec, render, repoRoot, type Manifest } from "../chart/helm.ts";
import { kubectl, useControlPlane } from "../harness/control-plane.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";
import { startReceiver, type Receiver } from "../harness/receiver.ts";
import { destinationYaml, secretYaml, sourceYaml, yamlDocuments } from "../harness/documents.ts";
import { freePorts } from "../harness/ports.ts";
import { parseDockerfile } from "../chart/dockerfile.ts";
import { tempDir } from "../harness/temp.ts";

const execFileAsync = promisify(execFile);
const cluster = useControlPlane();
const RELEASE = "th";
const COMPONENTS = ["operator", "ingest", "delivery"] as const;
type Component = (typeof COMPONENTS)[number];

// ---- the image, from the Dockerfile -----------------------------------------------------------

interface Image {
  dir: string;
  env: Record<string, string>;
  /** ENTRYPOINT after tini and its "--": node, its flags, the script (relative to dir). */
  entrypoint: string[];
  npmCiSeconds: number;
}

async function buildImage(root: string): Promise<Image> {
  const { stages } = parseDockerfile(readFileSync(join(repoRoot, "Dockerfile"), "utf8"));
  const final = stages.at(-1)!;
  const workdir = final.instructions.filter((i) => i.op === "WORKDIR").at(-1)?.args;
  expect(workdir, "the final stage's WORKDIR").toBe("/app");
  const dir = join(root, "app");
  mkdirSync(dir);
  let npmCiSeconds = 0;
  for (const copy of final.instructions.filter((i) => i.op === "COPY")) {
    const from = /^--from=(\S+)\s+/.exec(copy.args)?.[1];
    const paths = copy.args.replace(/^--from=\S+\s+/, "").split(/\s+/);
    const [src, dest] = [paths[0], paths.at(-1)];
    if (from === undefined && dest === "./" && paths.slice(0, -1).every((p) => !p.includes("/"))) {
      // Files of the repository's root (package.json, the licence): each must be there.
      for (const file of paths.slice(0, -1)) cpSync(join(repoRoot, file), join(dir, file));
    } else if (from !== undefined && src === "/app/node_modules" && dest === "./node_modules") {
      // That stage's `npm ci` in a directory of its own, like the stage's /app; only node_modules moves on.
      const stage = stages.find((s) => s.name === from);
      const run = stage?.instructions.find((i) => i.op === "RUN" && i.args.startsWith("npm ci"));
      expect(run, `a RUN npm ci in the Dockerfile's ${from} stage`).toBeDefined();
      const deps = join(root, "deps");
      mkdirSync(deps);
      for (const f of ["package.json", "package-lock.json"]) cpSync(join(repoRoot, f), join(deps, f));
      // From the npm cache when it can: this checks the lockfile's production set, not the registry.
      const started = performance.now();
      const npm = join(dirname(process.execPath), "npm");
      await execFileAsync(existsSync(npm) ? npm : "npm", [...run!.args.split(/\s+/).slice(1), "--prefer-offline"], {
        cwd: deps,
        env: { ...process.env, PATH: [dirname(process.execPath), process.env.PATH].join(delimiter) },
        maxBuffer: 16 * 1024 * 1024,
      });
      npmCiSeconds = (performance.now() - started) / 1000;
      renameSync(join(deps, "node_modules"), join(dir, "node_modules"));
    } else if (from !== undefined && src === "/app/dist" && dest === "./dist") {
      // `npm test` builds dist/ first; a bare vitest run on a fresh checkout builds it here.
      if (!existsSync(join(repoRoot, "dist", "cli", "main.js"))) {
        await execFileAsync("npm", ["run", "build"], { cwd: repoRoot, env: { ...process.env, PATH: [dirname(process.execPath), process.env.PATH].join(delimiter) } });
      }
      cpSync(join(repoRoot, "dist"), join(dir, "dist"), { recursive: true });
    } else {
      throw new Error(`the Dockerfile's final stage copies something this test does not lay out: COPY ${copy.args}`);
    }
  }
  const env: Record<string, string> = {};
  for (const e of final.instructions.filter((i) => i.op === "ENV")) {
    for (const m of e.args.matchAll(/(\w+)=("[^"]*"|\S+)/g)) env[m[1]!] = m[2]!.replace(/^"|"$/g, "");
  }
  const entry = final.instructions.filter((i) => i.op === "ENTRYPOINT").at(-1);
  const argv = JSON.parse(entry!.args) as string[];
  expect(argv.slice(0, 3), "ENTRYPOINT: tini -- node ...").toEqual(["/usr/bin/tini", "--", "node"]);
  return { dir, env, entrypoint: [process.execPath, ...argv.slice(3)], npmCiSeconds };
}

/** Every path under dir with its size and mtime (links not followed): to show nothing writes there. */
function snapshot(dir: string): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      const st = lstatSync(path);
      files.set(path.slice(dir.length), `${st.size}:${st.mtimeMs}`);
      if (st.isDirectory()) walk(path);
    }
  };
  walk(dir);
  return files;
}

// ---- the pods, from the chart ---------------------------------------------------------------

interface Pod {
  component: Component;
  name: string;
  container: Manifest;
  spec: Manifest;
  args: string[];
  env: Record<string, string>;
  /** containerPort (rendered) to the loopback port it listens on here, by port name too. */
  ports: Map<string | number, number>;
}


/**
 * The one change to the rendered args: the chart's ports (8080/8081/8082) would collide with other
 * test files running in parallel, so `--port=<containerPort>` becomes a free loopback port and
 * `--host=127.0.0.1` is added (a pod listens on 0.0.0.0 of its own network namespace). All other
 * args are exactly as rendered.
 */
function rewritePorts(args: string[], ports: Map<string | number, number>): string[] {
  const out = args.map((arg) => {
    const m = /^--port=(\d+)$/.exec(arg);
    if (!m) {
      if (arg === "--port" || arg.startsWith("--host")) throw new Error(`unexpected listen flag form in the chart: ${arg}`);
      return arg;
    }
    const local = ports.get(Number(m[1]));
    if (local === undefined) throw new Error(`${arg}: no containerPort ${m[1]} declared for it`);
    return `--port=${local}`;
  });
  return [...out, "--host=127.0.0.1"];
}

function resolveEnv(container: Manifest, configMaps: Map<string, Record<string, string>>, pod: { name: string; namespace: string }): Record<string, string> {
  const env: Record<string, string> = {};
  const configMap = (name: string) => {
    const data = configMaps.get(name);
    if (!data) throw new Error(`ConfigMap ${name} is not in the rendered chart`);
    return data;
  };
  for (const from of (container.envFrom ?? []) as Manifest[]) {
    if (!from.configMapRef) throw new Error(`envFrom ${JSON.stringify(from)}: only configMapRef is resolved here`);
    Object.assign(env, configMap(from.configMapRef.name));
  }
  for (const e of (container.env ?? []) as Manifest[]) {
    if (e.value !== undefined) env[e.name] = String(e.value);
    else if (e.valueFrom?.configMapKeyRef) {
      const value = configMap(e.valueFrom.configMapKeyRef.name)[e.valueFrom.configMapKeyRef.key];
      if (value === undefined) throw new Error(`${e.name}: key ${e.valueFrom.configMapKeyRef.key} missing from its ConfigMap`);
      env[e.name] = value;
    } else if (e.valueFrom?.fieldRef) {
      const field = e.valueFrom.fieldRef.fieldPath;
      if (field === "metadata.name") env[e.name] = pod.name;
      else if (field === "metadata.namespace") env[e.name] = pod.namespace;
      else throw new Error(`${e.name}: downward-API field ${field} not simulated`);
    } else {
      throw new Error(`${e.name}: ${JSON.stringify(e.valueFrom)} not resolved here (default values need no Secrets)`);
    }
  }
  return env;
}

/** A kubeconfig for the run's API server authenticating as ServiceAccount `sa` (a bound token). */
async function serviceAccountKubeconfig(path: string, namespace: string, sa: string): Promise<void> {
  const admin = cluster.kubeConfig().getCurrentCluster()!;
  const ca = admin.caData ?? (admin.caFile ? readFileSync(admin.caFile).toString("base64") : undefined);
  const token = (await cluster.kubectlOk(["create", "token", sa, "-n", namespace, "--duration=1h"])).trim();
  writeFileSync(path, stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "c", cluster: { server: admin.server, ...(ca ? { "certificate-authority-data": ca } : {}), ...(admin.skipTLSVerify ? { "insecure-skip-tls-verify": true } : {}) } }],
    users: [{ name: sa, user: { token } }],
    contexts: [{ name: "c", context: { cluster: "c", user: sa, namespace } }],
    "current-context": "c",
  }), { mode: 0o600 });
}

// ---- processes --------------------------------------------------------------------------------

interface Running {
  pod: Pod;
  child: ChildProcess;
  output: () => string;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function start(image: Image, pod: Pod): Running {
  const [node, ...entry] = image.entrypoint;
  // A container's environment: the image's ENV and the container's env, nothing of this test
  // runner's. PATH as the image has node on it; KUBERNETES_SERVICE_* as every pod gets them.
  const child = spawn(node!, [...entry, ...pod.args], {
    cwd: image.dir,
    env: { PATH: [dirname(process.execPath), "/usr/local/bin", "/usr/bin", "/bin"].join(delimiter), ...image.env, ...pod.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (b: Buffer) => (output += b.toString()));
  child.stderr!.on("data", (b: Buffer) => (output += b.toString()));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
  return { pod, child, output: () => output, exit };
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 15_000, detail: () => string = () => ""): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${detail()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** An httpGet probe as the kubelet runs it: the probe's path and port (by name), its timeout. */
async function httpProbe(proc: Running, probe: Manifest): Promise<{ status: number; body: string }> {
  const get = probe.httpGet;
  const port = proc.pod.ports.get(get.port);
  if (port === undefined) throw new Error(`${proc.pod.component}: probe port ${get.port} is not a declared containerPort`);
  const res = await fetch(`${(get.scheme ?? "HTTP").toLowerCase()}://127.0.0.1:${port}${get.path}`, { signal: AbortSignal.timeout((probe.timeoutSeconds ?? 1) * 1000) });
  return { status: res.status, body: await res.text() };
}

const probeOk = async (proc: Running, probe: Manifest) => {
  const res = await httpProbe(proc, probe);
  // The kubelet's success: 200 <= status < 400.
  return res.status >= 200 && res.status < 400 ? res : undefined;
};

// ---- the test -----------------------------------------------------------------------------------

let root = "";
let namespace = "";
let image: Image;
let nats: NatsHarness | undefined;
let receiver: Receiver | undefined;
let before: Map<string, string>;
const procs = new Map<Component, Running>();
const proc = (c: Component) => procs.get(c)!;
const logs = () => [...procs.values()].map((p) => `--- ${p.pod.component} ---\n${p.output()}`).join("\n");

beforeAll(async () => {
  root = tempDir("chart-processes");
  // Node resolves packages from the script's directory upwards: none but the image's may be found.
  for (let d = dirname(root); ; d = dirname(d)) {
    expect(existsSync(join(d, "node_modules")), `${d}/node_modules would be visible to the processes`).toBe(false);
    if (d === dirname(d)) break;
  }
  const started = performance.now();
  [namespace, nats, receiver, image] = await Promise.all([cluster.randomNamespace("chartproc"), startNats(), startReceiver(), buildImage(root)]);
  const manifests = await render({
    release: RELEASE,
    namespace,
    set: { "nats.url": nats.server.url, "operator.watchNamespace": namespace, "delivery.allowPrivateNetworks": "true" },
  });
  // What the operator's pod runs as: the chart's ServiceAccount and (namespace-scoped) RBAC.
  const rbac = manifests.filter((m) => ["ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"].includes(m.kind));
  expect(rbac.filter((m) => m.kind.startsWith("Cluster")), "watchNamespace renders no cluster-wide RBAC").toEqual([]);
  await cluster.kubectlOk(["apply", "-n", namespace, "-f", "-"], { input: rbac.map((m) => stringify(m)).join("---\n") });

  const configMaps = new Map<string, Record<string, string>>(manifests.filter((m) => m.kind === "ConfigMap").map((m) => [m.metadata.name, m.data ?? {}]));
  const api = new URL(cluster.kubeConfig().getCurrentCluster()!.server);
  const pods: Pod[] = [];
  for (const component of COMPONENTS) {
    const deployment = manifests.find((m) => m.kind === "Deployment" && m.metadata.labels?.["app.kubernetes.io/component"] === component);
    expect(deployment, `the ${component} Deployment`).toBeDefined();
    const spec = podSpec(deployment!)!;
    expect(spec.containers).toHaveLength(1);
    const container = spec.containers[0] as Manifest;
    expect(container.command, `${component}: the image's ENTRYPOINT runs, no command override`).toBeUndefined();
    const declared = (container.ports ?? []) as Manifest[];
    const local = await freePorts(declared.length);
    const ports = new Map<string | number, number>();
    declared.forEach((p, i) => {
      ports.set(p.containerPort, local[i]!);
      if (p.name) ports.set(p.name, local[i]!);
    });
    const name = `${deployment!.metadata.name}-${randomBytes(5).toString("hex").slice(0, 10)}-${randomBytes(3).toString("hex").slice(0, 5)}`;
    const env = {
      KUBERNETES_SERVICE_HOST: api.hostname,
      KUBERNETES_SERVICE_PORT: api.port || "443",
      ...resolveEnv(container, configMaps, { name, namespace }),
    };
    if (spec.automountServiceAccountToken !== false) {
      // Stands in for the mounted token: the operator reads KUBECONFIG before the in-cluster config.
      const kubeconfig = join(root, `${component}.kubeconfig`);
      await serviceAccountKubeconfig(kubeconfig, namespace, spec.serviceAccountName);
      Object.assign(env, { KUBECONFIG: kubeconfig });
      const who = await kubectl(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"], { kubeconfig });
      expect(who.stdout, who.stderr).toBe(`system:serviceaccount:${namespace}:${spec.serviceAccountName}`);
    }
    pods.push({ component, name, container, spec, args: rewritePorts(container.args ?? [], ports), env, ports });
  }
  expect(pods.find((p) => p.component === "operator")!.env.POD_NAMESPACE).toBe(namespace);
  expect(pods.find((p) => p.component === "delivery")!.args).toContain("--allow-private-networks");
  expect(pods.find((p) => p.component === "operator")!.args).toContain(`--watch-namespace=${namespace}`);
  // Before any process starts: the last test checks that none wrote into the image directory.
  before = snapshot(image.dir);
  for (const pod of pods) procs.set(pod.component, start(image, pod));
  console.log(`chart-processes: image laid out (npm ci ${image.npmCiSeconds.toFixed(1)} s), ${pods.length} processes started in ${((performance.now() - started) / 1000).toFixed(1)} s`);
});

afterAll(async () => {
  for (const p of procs.values()) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
    await p.exit;
  }
  await receiver?.close();
  await nats?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

async function waitReady(plural: string, name: string): Promise<Manifest> {
  return waitFor(`${plural}/${name} Ready=True`, async () => {
    const object = JSON.parse(await cluster.kubectlOk(["get", `${plural}.trackhook.io`, name, "-n", namespace, "-o", "json"])) as Manifest;
    const ready = (object.status?.conditions ?? []).find((c: Manifest) => c.type === "Ready");
    return ready?.status === "True" && object.status.observedGeneration === object.metadata.generation ? object : undefined;
  }, 15_000, logs);
}

describe("the chart's pods, run as processes", () => {
  it("every process passes its startup probe, then its readiness probe", async () => {
    for (const c of COMPONENTS) {
      const { container } = proc(c).pod;
      // Within the startup probe's budget (failureThreshold x periodSeconds), capped for test time.
      const budget = Math.min(container.startupProbe.failureThreshold * container.startupProbe.periodSeconds * 1000, 20_000);
      await waitFor(`${c} ${container.startupProbe.httpGet.path}`, () => probeOk(proc(c), container.startupProbe), budget, logs);
      expect((await httpProbe(proc(c), container.livenessProbe)).status).toBe(200);
    }
    for (const c of COMPONENTS) {
      await waitFor(`${c} ${proc(c).pod.container.readinessProbe.httpGet.path}`, () => probeOk(proc(c), proc(c).pod.container.readinessProbe), 20_000, logs);
    }
    // The leader Lease is the release's own in this namespace, held by the made-up pod name.
    const lease = JSON.parse(await cluster.kubectlOk(["get", "lease", `${RELEASE}-trackhook-operator`, "-n", namespace, "-o", "json"])) as Manifest;
    expect(lease.spec.holderIdentity).toMatch(new RegExp(`^${proc("operator").pod.name}_`));
  });

  it("a Source and a WebhookDestination applied with kubectl become Ready", async () => {
    await cluster.kubectlOk(["apply", "-n", namespace, "-f", "-"], {
      input: yamlDocuments(
        secretYaml("web-key", { writeKey: "chart-processes-key" }),
        sourceYaml("web", { name: "web-key" }),
        secretYaml("hook-secret", { shared: "chart-s3cret" }),
        destinationYaml("hook", { sources: ["web"], urls: [receiver!.url("/hook")], sharedSecret: { name: "hook-secret", key: "shared" } }),
      ),
    });
    await waitReady("sources", "web");
    expect((await waitReady("webhookdestinations", "hook")).status).toMatchObject({ urlCount: 1, sources: ["web"] });
    // The chart's Role lets the operator record Events (a failure there is only a warning in its log).
    const recorded = await waitFor("the operator's Events", async () => {
      const events = (JSON.parse(await cluster.kubectlOk(["get", "events", "-n", namespace, "-o", "json"])) as Manifest).items as Manifest[];
      const kinds = new Set(events.filter((e) => e.source?.component === "trackhook-operator").map((e) => `${e.involvedObject.kind}/${e.involvedObject.name}`));
      return kinds.has("Source/web") && kinds.has("WebhookDestination/hook") ? kinds : undefined;
    }, 5_000, logs);
    expect(recorded.size).toBe(2);
  });

  it("events sent with @segment/analytics-node to ingest reach the receiver, signed with the shared secret", async () => {
    const ingestUrl = `http://127.0.0.1:${proc("ingest").pod.ports.get("http")}`;
    // The config reaches ingest and delivery through NATS a moment after Ready. A new destination's
    // consumer takes what arrives from its creation on, so wait for it before sending anything.
    await waitFor("delivery's consumer for the destination", () => nats!.jsm.consumers.info(EVENTS_STREAM, consumerName(namespace, "hook")), 10_000, logs);
    await waitFor("the write key accepted by ingest", async () => {
      const res = await fetch(`${ingestUrl}/v1/track`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Basic ${Buffer.from("chart-processes-key:").toString("base64")}` },
        body: JSON.stringify({ userId: "warmup", event: "Warmup", messageId: "warmup-1" }),
      });
      return res.status === 200;
    }, 10_000, logs);
    // The image has analytics.js from dist/vendor/ only (a dev dependency's bundle, copied by the build).
    const script = await fetch(`${ingestUrl}/analytics.js/v1/chart-processes-key/analytics.min.js`);
    expect(script.status, await script.clone().text().then((t) => t.slice(0, 200))).toBe(200);
    expect(await script.text()).toContain("analytics");

    const analytics = new Analytics({ writeKey: "chart-processes-key", host: ingestUrl, path: "/v1/batch", maxEventsInBatch: 100, flushInterval: 60_000, httpRequestTimeout: 10_000, maxRetries: 0 });
    const statuses: number[] = [];
    const errors: unknown[] = [];
    analytics.on("http_response", (res) => statuses.push(res.status));
    analytics.on("error", (err) => errors.push(err));
    analytics.identify({ userId: "u-1", traits: { plan: "pro" } });
    analytics.track({ userId: "u-1", event: "Order Completed", properties: { revenue: 42 } });
    analytics.page({ anonymousId: "a-1", name: "Pricing" });
    await analytics.closeAndFlush({ timeout: 10_000 });
    expect(errors).toEqual([]);
    expect(statuses).toEqual([200]);

    const received = await receiver!.waitFor("/hook", 4, 15_000);
    const bodies = received.map((r) => JSON.parse(r.body.toString()) as Manifest);
    expect(bodies.map((b) => b.type).sort()).toEqual(["identify", "page", "track", "track"]);
    expect(bodies.find((b) => b.event === "Order Completed")).toMatchObject({ userId: "u-1", properties: { revenue: 42 } });
    for (const r of received) {
      expect(r.headers["x-signature"]).toBe(createHmac("sha1", "chart-s3cret").update(r.body).digest("hex"));
    }
  });

  it("shut down like the kubelet: each exits 0 within its terminationGracePeriodSeconds", async () => {
    const results = await Promise.all(COMPONENTS.map(async (c) => {
      const p = proc(c);
      const started = performance.now();
      const preStop = p.pod.container.lifecycle?.preStop?.exec?.command as string[] | undefined;
      if (preStop) {
        // The kubelet runs preStop in the container, then sends SIGTERM; the grace period covers both.
        // Meanwhile the process keeps serving: still ready, and its listener still answers.
        const hook = spawn(preStop[0]!, preStop.slice(1), { stdio: "ignore" });
        const done = new Promise<number | null>((resolve) => hook.once("exit", (code) => resolve(code)));
        expect((await httpProbe(p, p.pod.container.readinessProbe)).status).toBe(200);
        expect(await done).toBe(0);
      }
      p.child.kill("SIGTERM");
      const grace = p.pod.spec.terminationGracePeriodSeconds as number;
      let timer: NodeJS.Timeout | undefined;
      const exit = await Promise.race([p.exit, new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), grace * 1000 - (performance.now() - started))))]);
      clearTimeout(timer);
      return { component: c, exit, seconds: (performance.now() - started) / 1000, grace };
    }));
    for (const r of results) {
      expect(r.exit, `${r.component} after SIGTERM (${r.seconds.toFixed(1)} s of ${r.grace} s)\n${logs()}`).toEqual({ code: 0, signal: null });
    }
    // Every process stopped cleanly, said so, and logged no error on the way.
    for (const c of COMPONENTS) {
      const lines = proc(c).output().trim().split("\n").map((l) => JSON.parse(l) as { level: number; msg: string });
      expect(lines.filter((l) => l.level >= 50), `${c} error logs`).toEqual([]);
      expect(lines.at(-1)!.msg).toBe("stopped");
    }
  });

  it("nothing was written into the image directory (the pods' root filesystem is read-only)", () => {
    const after = snapshot(image.dir);
    const changed = [...new Set([...before.keys(), ...after.keys()])].filter((k) => before.get(k) !== after.get(k));
    expect(changed).toEqual([]);
  });
});
