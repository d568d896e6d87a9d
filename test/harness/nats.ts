// Test harness: a real nats-server per test file, on a free port with its own temporary store.
//
// The pinned nats-server from .tools/bin, unless TRACKHOOK_TEST_NATS_SERVER names another binary
// and TRACKHOOK_TEST_NATS_FEATURE_FLAGS (comma-separated) turns on server feature flags: the vitest
// project "nats-next" (vitest.config.ts) runs the NATS-facing tests a second time on the newest
// release line with the flags NATS means to make defaults.
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager, type StreamConfig } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { LocalNatsServer, ensureStream, patiently } from "../../dataplane/nats/mod.ts";
import { freePorts } from "./ports.ts";

export interface NatsHarness {
  server: LocalNatsServer;
  /** A client connection for the test's own checks. */
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** Opens another connection (give one to the code under test). */
  connect(): Promise<NatsConnection>;
  stop(): Promise<void>;
}

/** The binary and the settings the tests' nats-servers run with (see the top of this file). */
export function serverUnderTest(storeDir: string): { binary?: string; args: string[] } {
  const binary = process.env.TRACKHOOK_TEST_NATS_SERVER || undefined;
  if (binary && !existsSync(binary)) throw new Error(`TRACKHOOK_TEST_NATS_SERVER names ${binary}, which is not there: run \`npm run tools\``);
  const flags = (process.env.TRACKHOOK_TEST_NATS_FEATURE_FLAGS ?? "").split(",").map((f) => f.trim()).filter(Boolean);
  if (flags.length === 0) return { binary, args: [] };
  // Feature flags have no command-line form: a config file in the server's own store directory.
  const config = join(storeDir, "feature-flags.conf");
  writeFileSync(config, `feature_flags {\n${flags.map((f) => `  ${f}: true\n`).join("")}}\n`);
  return { binary, args: ["-c", config] };
}

export async function startNats(): Promise<NatsHarness> {
  const storeDir = mkdtempSync(join(tmpdir(), "trackhook-nats-"));
  const { binary, args } = serverUnderTest(storeDir);
  const server = await LocalNatsServer.start({ storeDir, binary, args });
  const { open, closeAll } = connections(server.url);
  const nc = await open();
  return {
    server,
    nc,
    js: jetstream(nc),
    jsm: await jetstreamManager(nc),
    connect: open,
    async stop() {
      await closeAll();
      await server.stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}

export interface NatsClusterHarness {
  servers: LocalNatsServer[];
  /** Every server's client URL, comma-separated, as --nats takes them. */
  urls: string;
  nc: NatsConnection;
  jsm: JetStreamManager;
  /**
   * Makes a stream as trackhook's processes do at their start, tried again while the cluster is slow
   * to answer: on a cluster just formed, beside other test files on 2 cores, making an R3 stream
   * once took over delivery's 5 s API timeout, and another time over this harness's 10 s.
   */
  ensureStream(config: Partial<StreamConfig> & { name: string }): Promise<void>;
  /** Opens another connection to the cluster (any server). */
  connect(): Promise<NatsConnection>;
  stop(): Promise<void>;
}

/**
 * A JetStream cluster of `size` nats-servers on loopback, as production runs it (replicas 3);
 * resolves once JetStream answers (a meta leader is elected).
 */
export async function startNatsCluster(size = 3): Promise<NatsClusterHarness> {
  const routePorts = await freePorts(size);
  const routes = routePorts.map((p) => `nats://127.0.0.1:${p}`).join(",");
  const name = randomName("c");
  const dirs = routePorts.map(() => mkdtempSync(join(tmpdir(), "trackhook-nats-cluster-")));
  const servers = await Promise.all(
    routePorts.map((port, i) => {
      const { binary, args } = serverUnderTest(dirs[i]!);
      return LocalNatsServer.start({
        storeDir: dirs[i]!, binary,
        args: [...args, "--cluster", `nats://127.0.0.1:${port}`, "--routes", routes, "--cluster_name", name, "--server_name", `${name}-n${i + 1}`],
      });
    }),
  );
  const urls = servers.map((s) => s.url).join(",");
  const { open, closeAll } = connections(urls);
  const nc = await open();
  // A longer timeout than startNats's: an R3 stream or consumer takes a Raft round to make.
  const jsm = await jetstreamManager(nc, { timeout: 10_000, checkAPI: false });
  const probe = await jetstreamManager(nc, { timeout: 500, checkAPI: false });
  for (const deadline = Date.now() + 30_000; ; ) {
    try {
      await probe.getAccountInfo();
      break;
    } catch (err) {
      if (Date.now() > deadline) throw new Error("the NATS cluster elected no JetStream leader in 30 s", { cause: err });
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return {
    servers,
    urls,
    nc,
    jsm,
    async ensureStream(config) {
      await patiently(`making ${config.name}`, () => ensureStream(jsm, config), { warn() {} });
    },
    connect: open,
    async stop() {
      await closeAll();
      await Promise.all(servers.map((s) => s.stop()));
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Test connections that reconnect for ever, all closed by closeAll(). */
function connections(servers: string) {
  const opened: NatsConnection[] = [];
  return {
    async open(): Promise<NatsConnection> {
      const nc = await connect({ servers, maxReconnectAttempts: -1, reconnectTimeWait: 100, noAsyncTraces: true });
      opened.push(nc);
      return nc;
    },
    closeAll: () => Promise.all(opened.map((c) => c.close().catch(() => {}))),
  };
}

/**
 * A backup of the server's store as a volume snapshot takes it: the server stopped, its store
 * copied, the server started again. `restore()` puts the copy back the same way: the streams as
 * they were then, with the same names and creation times, their sequences gone back.
 */
export async function coldBackup(nats: NatsHarness): Promise<{ restore(): Promise<void> }> {
  const { server } = nats;
  const copy = mkdtempSync(join(tmpdir(), "trackhook-nats-backup-"));
  await server.kill();
  cpSync(server.storeDir, copy, { recursive: true });
  await server.restart();
  return {
    async restore() {
      await server.kill();
      rmSync(server.storeDir, { recursive: true, force: true });
      cpSync(copy, server.storeDir, { recursive: true });
      rmSync(copy, { recursive: true, force: true });
      await server.restart();
    },
  };
}

/** A random name for streams, buckets and consumers, so tests sharing a server never collide. */
export function randomName(prefix = "t"): string {
  return `${prefix}_${Math.random().toString(36).slice(2, 10)}`;
}
