// A Kubernetes control plane without containers: etcd and kube-apiserver as plain processes on
// loopback ports, with throw-away certificates (see docs in /work/shared/research/k8s.md §3).
// There is no kube-controller-manager, so: no garbage collection of ownerRef dependents,
// namespaces never finish deleting, Deployments get no ReplicaSets/Pods. Test what the API server
// itself does (validation, CEL, RBAC, TokenRequest), and use a fresh namespace per test.
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { accessSync, constants, closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { delimiter, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { randomBytes } from "node:crypto";
import * as k8s from "@kubernetes/client-node";
import { inject } from "vitest";
import { stringify } from "yaml";
import { freePorts } from "./ports.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** Set by test/harness/control-plane-setup.ts (the "kube" project's globalSetup). */
    trackhookKubeconfig?: string;
  }
}

const execFileAsync = promisify(execFile);

export const repoRoot = fileURLToPath(new URL("../../", import.meta.url));

export interface ControlPlaneOptions {
  /** State directory (certs, etcd data, logs, kubeconfig); created if missing. */
  dir: string;
  /** Progress lines of the harness itself (process output goes to <dir>/*.log). */
  log?: (line: string) => void;
  /** Processes outlive the caller; their pids go to <dir>/pids.json for stopControlPlaneAt. */
  detached?: boolean;
  /** How long to wait for kube-apiserver's /readyz; default 60 s. */
  readyTimeoutMs?: number;
}

export interface ControlPlane {
  readonly dir: string;
  /** Admin kubeconfig (client cert in group system:masters). */
  readonly kubeconfigPath: string;
  /** https://127.0.0.1:<port> */
  readonly server: string;
  /** http://127.0.0.1:<port> */
  readonly etcdUrl: string;
  /** SIGTERM, SIGKILL after 10 s; removes dir only when asked. */
  stop(options?: { removeDir?: boolean }): Promise<void>;
}

/** What <dir>/pids.json records. */
export interface ControlPlaneState {
  /** The process that started the control plane; undefined when detached. */
  owner?: number;
  server: string;
  etcdUrl: string;
  kubeconfigPath: string;
  processes: Array<{ name: string; pid: number; binary: string }>;
}

const STOP_GRACE_MS = 10_000;

/** .tools/bin/<name>, else the first <name> on PATH. */
export function findBinary(name: string): string {
  const candidates = [join(repoRoot, ".tools", "bin", name), ...(process.env.PATH ?? "").split(delimiter).filter(Boolean).map((d) => join(d, name))];
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // next
    }
  }
  throw new Error(`${name} not found in ${join(repoRoot, ".tools", "bin")} or on PATH: run npm run tools`);
}

export async function startControlPlane(options: ControlPlaneOptions): Promise<ControlPlane> {
  const log = options.log ?? (() => {});
  const dir = resolve(options.dir);
  const detached = options.detached ?? false;
  const started = performance.now();
  const elapsed = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;
  // Fail before writing anything when a binary is missing.
  const etcdBin = findBinary("etcd");
  const apiserverBin = findBinary("kube-apiserver");
  mkdirSync(dir, { recursive: true });
  const certs = join(dir, "certs");
  mkdirSync(certs, { recursive: true });

  const [etcdClientPort, etcdPeerPort, apiserverPort] = await freePorts(3);
  const etcdUrl = `http://127.0.0.1:${etcdClientPort}`;
  const etcdPeerUrl = `http://127.0.0.1:${etcdPeerPort}`;
  const server = `https://127.0.0.1:${apiserverPort}`;

  await makeCerts(certs);
  log(`control plane: certificates in ${certs} (${elapsed()})`);

  const processes: RunningProcess[] = [];
  const state: ControlPlaneState = {
    owner: detached ? undefined : process.pid,
    server,
    etcdUrl,
    kubeconfigPath: join(dir, "kubeconfig"),
    processes: [],
  };
  const record = () => writeFileSync(join(dir, "pids.json"), JSON.stringify(state, null, 2) + "\n");
  const stopAll = async () => {
    // The API server first, so it does not spend its shutdown retrying a vanished etcd.
    for (const p of [...processes].reverse()) await terminate(p.pid, p.binary);
  };

  try {
    const etcd = launch("etcd", etcdBin, [
      "--name", "trackhook",
      "--data-dir", join(dir, "etcd"),
      "--listen-client-urls", etcdUrl,
      "--advertise-client-urls", etcdUrl,
      "--listen-peer-urls", etcdPeerUrl,
      "--initial-advertise-peer-urls", etcdPeerUrl,
      "--initial-cluster", `trackhook=${etcdPeerUrl}`,
      // Test data: durability is not worth the fsync latency.
      "--unsafe-no-fsync",
      "--logger", "zap",
      "--log-level", "warn",
    ], join(dir, "etcd.log"), detached);
    processes.push(etcd);
    state.processes.push({ name: "etcd", pid: etcd.pid, binary: etcdBin });
    record();
    await waitFor("etcd /health", 20_000, etcd, async () => {
      const res = await fetch(`${etcdUrl}/health`, { signal: AbortSignal.timeout(2_000) });
      const body = (await res.json()) as { health?: string };
      return res.ok && body.health === "true";
    });
    log(`control plane: etcd ready at ${etcdUrl} (${elapsed()})`);

    const apiserver = launch("kube-apiserver", apiserverBin, [
      `--etcd-servers=${etcdUrl}`,
      `--cert-dir=${certs}`,
      `--secure-port=${apiserverPort}`,
      "--bind-address=127.0.0.1",
      "--advertise-address=127.0.0.1",
      "--service-cluster-ip-range=10.0.0.0/24",
      "--allow-privileged=true",
      // No token controller runs, so the admission plugin would reject Pods lacking a token Secret.
      "--disable-admission-plugins=ServiceAccount",
      "--authorization-mode=RBAC",
      `--service-account-issuer=${server}/`,
      // One RSA private key serves as both: the public half verifies, the private half signs.
      `--service-account-key-file=${join(certs, "sa.key")}`,
      `--service-account-signing-key-file=${join(certs, "sa.key")}`,
      `--client-ca-file=${join(certs, "ca.crt")}`,
      `--tls-cert-file=${join(certs, "apiserver.crt")}`,
      `--tls-private-key-file=${join(certs, "apiserver.key")}`,
      // Nothing would answer at the "kubernetes" Service's endpoint anyway; skip reconciling it.
      "--endpoint-reconciler-type=none",
    ], join(dir, "kube-apiserver.log"), detached);
    processes.push(apiserver);
    state.processes.push({ name: "kube-apiserver", pid: apiserver.pid, binary: apiserverBin });
    record();

    const tls = {
      ca: readFileSync(join(certs, "ca.crt")),
      cert: readFileSync(join(certs, "admin.crt")),
      key: readFileSync(join(certs, "admin.key")),
    };
    await waitFor("kube-apiserver /readyz", options.readyTimeoutMs ?? 60_000, apiserver, async () => {
      const { status } = await httpsGet(`${server}/readyz`, tls);
      return status === 200;
    });
    writeKubeconfig(state.kubeconfigPath, server, tls);
    record();
    log(`control plane: kube-apiserver ready at ${server} (${elapsed()})`);
  } catch (err) {
    await stopAll();
    throw err;
  } finally {
    // The children keep their own copies of the log descriptors.
    for (const p of processes) closeSync(p.logFd);
    if (detached) for (const p of processes) p.child.unref();
  }

  return {
    dir,
    kubeconfigPath: state.kubeconfigPath,
    server,
    etcdUrl,
    async stop(stopOptions) {
      await stopAll();
      if (stopOptions?.removeDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The recorded state when <dir> holds a control plane whose processes are all still alive. */
export function controlPlaneAt(dir: string): ControlPlaneState | undefined {
  const state = readState(dir);
  if (!state || state.processes.length === 0) return undefined;
  return state.processes.every((p) => isOurProcess(p.pid, p.binary)) ? state : undefined;
}

/**
 * Stops the processes recorded in <dir>/pids.json (checking each pid still runs the recorded
 * binary) and removes <dir>. Returns whether anything was running.
 */
export async function stopControlPlaneAt(dir: string): Promise<boolean> {
  const state = readState(dir);
  let stopped = false;
  for (const p of [...(state?.processes ?? [])].reverse()) stopped = (await terminate(p.pid, p.binary)) || stopped;
  rmSync(dir, { recursive: true, force: true });
  return stopped;
}

/**
 * Stops control planes under <parent> whose names start with <prefix> and whose owner process is
 * gone: the leftovers of test runs that were killed before their teardown.
 */
export async function reapOrphanedControlPlanes(parent: string, prefix: string): Promise<string[]> {
  const reaped: string[] = [];
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return reaped;
  }
  for (const name of names.filter((n) => n.startsWith(prefix))) {
    const dir = join(parent, name);
    const state = readState(dir);
    if (state?.owner === undefined || isAlive(state.owner)) continue;
    await stopControlPlaneAt(dir);
    reaped.push(dir);
  }
  return reaped;
}

// ---- vitest side ----------------------------------------------------------------------------

export interface KubectlResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface KubectlOptions {
  input?: string;
  /** Defaults to the cluster of the current test run (see useControlPlane). */
  kubeconfig?: string;
}

export interface ClusterAccess {
  /** A kubeconfig path; from TRACKHOOK_TEST_KUBECONFIG it may be a list (path1:path2), as kubectl accepts. */
  readonly kubeconfigPath: string;
  /** True when the tests run against a cluster given by TRACKHOOK_TEST_KUBECONFIG (kind, ...), not ours. */
  readonly external: boolean;
  kubectl(args: string[], options?: { input?: string }): Promise<KubectlResult>;
  /** kubectl that throws (with stderr) on a non-zero exit; returns stdout. */
  kubectlOk(args: string[], options?: { input?: string }): Promise<string>;
  /** A @kubernetes/client-node KubeConfig for this cluster. */
  kubeConfig(): k8s.KubeConfig;
  randomNamespace(prefix?: string): Promise<string>;
}

/**
 * The cluster for the current vitest run: TRACKHOOK_TEST_KUBECONFIG when set (an explicit opt-in, so the same tests run against
 * kind), else the control plane the "kube" project's globalSetup started.
 */
export function useControlPlane(): ClusterAccess {
  const fromEnv = process.env.TRACKHOOK_TEST_KUBECONFIG;
  const kubeconfigPath = fromEnv || inject("trackhookKubeconfig");
  if (!kubeconfigPath) {
    throw new Error("no control plane: run this file in the vitest project \"kube\" (its globalSetup starts one), or set TRACKHOOK_TEST_KUBECONFIG");
  }
  return {
    kubeconfigPath,
    external: Boolean(fromEnv),
    kubectl: (args, options) => kubectl(args, { ...options, kubeconfig: kubeconfigPath }),
    kubectlOk: (args, options) => kubectlOk(args, { ...options, kubeconfig: kubeconfigPath }),
    kubeConfig: () => loadKubeConfig(kubeconfigPath),
    randomNamespace: (prefix) => randomNamespace(prefix, kubeconfigPath),
  };
}

function currentKubeconfig(): string {
  return useControlPlane().kubeconfigPath;
}

export function kubectl(args: string[], options: KubectlOptions = {}): Promise<KubectlResult> {
  const kubeconfig = options.kubeconfig ?? currentKubeconfig();
  // Through the environment rather than --kubeconfig: KUBECONFIG may be a list of files.
  const child = spawn(findBinary("kubectl"), args, {
    env: { ...process.env, KUBECONFIG: kubeconfig },
    stdio: ["pipe", "pipe", "pipe"],
  });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on("data", (b: Buffer) => out.push(b));
  child.stderr.on("data", (b: Buffer) => err.push(b));
  child.stdin.end(options.input ?? "");
  return new Promise((resolvePromise, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) =>
      resolvePromise({
        code: code ?? (signal ? 128 : 1),
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      }),
    );
  });
}

export async function kubectlOk(args: string[], options: KubectlOptions = {}): Promise<string> {
  const result = await kubectl(args, options);
  if (result.code !== 0) throw new Error(`kubectl ${args.join(" ")} exited with ${result.code}: ${result.stderr.trim()}`);
  return result.stdout;
}

/** Applies crds/ (server-side) and waits until the API server serves them. */
export async function applyCrds(kubeconfig?: string): Promise<void> {
  const crds = join(repoRoot, "crds");
  // --force-conflicts: the repo's definitions win over whatever else manages them (e.g. a helm install).
  await kubectlOk(["apply", "--server-side", "--force-conflicts", "-f", crds], { kubeconfig });
  // By file rather than `crd --all`, so a shared cluster's unrelated CRDs are not waited for.
  await kubectlOk(["wait", "--for", "condition=established", "--timeout=60s", "-f", crds], { kubeconfig });
}

/** Creates a namespace <prefix>-<random>; there is no cleanup (see the file comment). */
export async function randomNamespace(prefix = "t", kubeconfig?: string): Promise<string> {
  const name = `${prefix}-${randomBytes(4).toString("hex")}`;
  await kubectlOk(["create", "namespace", name], { kubeconfig });
  return name;
}

export function loadKubeConfig(kubeconfigPath: string = currentKubeconfig()): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  if (kubeconfigPath.includes(delimiter)) {
    // loadFromDefault merges a KUBECONFIG list the way kubectl does.
    const saved = process.env.KUBECONFIG;
    process.env.KUBECONFIG = kubeconfigPath;
    try {
      kc.loadFromDefault();
    } finally {
      if (saved === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = saved;
    }
  } else {
    kc.loadFromFile(kubeconfigPath);
  }
  return kc;
}

// ---- internals ------------------------------------------------------------------------------

interface RunningProcess {
  name: string;
  pid: number;
  binary: string;
  child: ChildProcess;
  logPath: string;
  logFd: number;
  /** Set once the process exited; carries the exit description. */
  exited?: string;
}

function launch(name: string, binary: string, args: string[], logPath: string, detached: boolean): RunningProcess {
  const logFd = openSync(logPath, "a");
  // detached: own process group, so a Ctrl-C to the caller's terminal does not reach it either.
  const child = spawn(binary, args, { stdio: ["ignore", logFd, logFd], detached });
  if (child.pid === undefined) {
    closeSync(logFd);
    throw new Error(`could not start ${binary}`);
  }
  const running: RunningProcess = { name, pid: child.pid, binary, child, logPath, logFd };
  child.on("exit", (code, signal) => {
    running.exited = signal ? `killed by ${signal}` : `exited with code ${code}`;
  });
  child.on("error", (err) => {
    running.exited = `failed: ${err.message}`;
  });
  return running;
}

async function waitFor(what: string, timeoutMs: number, proc: RunningProcess, ready: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const { logPath } = proc;
  for (;;) {
    if (proc.exited) throw new Error(`${proc.name} ${proc.exited} before ${what} answered; last lines of ${logPath}:\n${tail(logPath)}`);
    try {
      if (await ready()) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${what} not ready after ${timeoutMs / 1000} s; last lines of ${logPath}:\n${tail(logPath)}`);
    await sleep(200);
  }
}

function tail(path: string, lines = 30): string {
  try {
    return readFileSync(path, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}


// A config of our own, so the distribution's openssl.cnf defaults (e.g. CA:TRUE on every
// `req -x509`) do not leak into leaf certificates.
const OPENSSL_CNF = `[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
`;

async function makeCerts(certs: string): Promise<void> {
  const cnf = join(certs, "openssl.cnf");
  writeFileSync(cnf, OPENSSL_CNF);
  const openssl = (args: string[]) => execFileAsync("openssl", args, { cwd: certs }).catch((err: Error & { stderr?: string }) => {
    throw new Error(`openssl ${args.join(" ")} failed: ${err.stderr ?? err.message}`);
  });
  // P-256 keys for TLS: generated in milliseconds, where RSA takes noticeably longer.
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  const sign = ["-CA", "ca.crt", "-CAkey", "ca.key"];
  await openssl(["req", "-config", cnf, "-x509", "-new", ...ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650", "-subj", "/CN=trackhook-test-ca", "-extensions", "ca"]);
  await Promise.all([
    openssl(["req", "-config", cnf, "-x509", "-new", ...ec, ...sign, "-keyout", "apiserver.key", "-out", "apiserver.crt", "-days", "365", "-subj", "/CN=kube-apiserver", "-extensions", "server"]),
    openssl(["req", "-config", cnf, "-x509", "-new", ...ec, ...sign, "-keyout", "admin.key", "-out", "admin.crt", "-days", "365", "-subj", "/O=system:masters/CN=trackhook-admin", "-extensions", "client"]),
    // Service-account tokens: RSA, the algorithm every token consumer supports.
    openssl(["genrsa", "-out", "sa.key", "2048"]),
  ]);
}

function writeKubeconfig(path: string, server: string, tls: { ca: Buffer; cert: Buffer; key: Buffer }): void {
  const config = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "trackhook", cluster: { server, "certificate-authority-data": tls.ca.toString("base64") } }],
    users: [{ name: "trackhook-admin", user: { "client-certificate-data": tls.cert.toString("base64"), "client-key-data": tls.key.toString("base64") } }],
    contexts: [{ name: "trackhook", context: { cluster: "trackhook", user: "trackhook-admin", namespace: "default" } }],
    "current-context": "trackhook",
  };
  writeFileSync(path, stringify(config), { mode: 0o600 });
}

function httpsGet(url: string, tls: { ca: Buffer; cert: Buffer; key: Buffer }): Promise<{ status: number; body: string }> {
  return new Promise((resolvePromise, reject) => {
    const req = request(url, { ...tls, timeout: 2_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolvePromise({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end();
  });
}

function readState(dir: string): ControlPlaneState | undefined {
  const path = join(dir, "pids.json");
  if (!existsSync(path)) return undefined;
  try {
    return JSON.parse(readFileSync(path, "utf8")) as ControlPlaneState;
  } catch {
    return undefined;
  }
}

/** Alive and not a zombie (a PID 1 that never reaps would otherwise keep it "alive" forever). */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The state follows the parenthesised command name, which may itself contain ") ".
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    if (existsSync("/proc/self/stat")) return false;
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
}

/** Alive and still running <binary>: a recorded pid may have been reused by an unrelated process. */
function isOurProcess(pid: number, binary: string): boolean {
  if (!isAlive(pid)) return false;
  try {
    const argv0 = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0];
    return argv0 === binary;
  } catch {
    return true; // no /proc: trust the pid
  }
}

/** SIGTERM, then SIGKILL after STOP_GRACE_MS; resolves once the process is gone. */
async function terminate(pid: number, binary: string): Promise<boolean> {
  if (!isOurProcess(pid, binary)) return false;
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(pid, s);
    } catch {
      // already gone
    }
  };
  signal("SIGTERM");
  const deadline = Date.now() + STOP_GRACE_MS;
  while (isAlive(pid) && Date.now() < deadline) await sleep(50);
  if (isAlive(pid)) {
    signal("SIGKILL");
    while (isAlive(pid)) await sleep(50);
  }
  return true;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
