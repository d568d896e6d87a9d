// Test harness: a real nats-server per test file, on a free port with its own temporary store.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { LocalNatsServer } from "../../dataplane/nats/mod.ts";

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

export async function startNats(): Promise<NatsHarness> {
  const storeDir = mkdtempSync(join(tmpdir(), "trackhook-nats-"));
  const server = await LocalNatsServer.start({ storeDir });
  const connections: NatsConnection[] = [];
  const open = async () => {
    const nc = await connect({ servers: server.url, maxReconnectAttempts: -1, reconnectTimeWait: 100, noAsyncTraces: true });
    connections.push(nc);
    return nc;
  };
  const nc = await open();
  return {
    server,
    nc,
    js: jetstream(nc),
    jsm: await jetstreamManager(nc),
    connect: open,
    async stop() {
      await Promise.all(connections.map((c) => c.close().catch(() => {})));
      await server.stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}

/** A random name for streams, buckets and consumers, so tests sharing a server never collide. */
export function randomName(prefix = "t"): string {
  return `${prefix}_${Math.random().toString(36).slice(2, 10)}`;
}
