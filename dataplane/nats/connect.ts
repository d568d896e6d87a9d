// One way to connect to NATS for every component: reconnect forever, name the connection,
// report status changes to the logger.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../logging.ts";

export interface ConnectOptions {
  servers: string;
  name: string;
  log: Logger;
}

export async function connectNats({ servers, name, log }: ConnectOptions): Promise<NatsConnection> {
  log.info({ servers }, "connecting to NATS (waiting until it answers)");
  const nc = await connect({
    servers: servers.split(",").map((s) => s.trim()),
    name,
    maxReconnectAttempts: -1,
    // Pods may start before NATS does; keep trying instead of exiting.
    waitOnFirstConnect: true,
    reconnectTimeWait: 500,
    // An Error per request for async stack traces costs ~40% of publish throughput.
    noAsyncTraces: true,
  });
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "disconnect" || status.type === "error") log.warn({ nats: status.type, server: "server" in status ? status.server : undefined }, "NATS connection problem");
      else if (status.type === "reconnect") log.info({ nats: status.type }, "NATS reconnected");
    }
  })();
  return nc;
}
