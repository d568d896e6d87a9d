// One way to connect to NATS for every component: reconnect forever, name the connection,
// report status changes to the logger.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../logging.ts";
import { assertNoCredentialsInUrl, natsAuthOptions } from "./auth.ts";

export interface ConnectOptions {
  servers: string;
  name: string;
  log: Logger;
}

export async function connectNats({ servers, name, log }: ConnectOptions): Promise<NatsConnection> {
  assertNoCredentialsInUrl(servers);
  const auth = natsAuthOptions(); // a missing creds file fails here, before waiting on NATS
  log.info({ servers, auth: describeAuth(auth) }, "connecting to NATS (waiting until it answers)");
  const nc = await connect({
    ...auth,
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

/** What kind of credentials are in use, for the log (never their values). */
function describeAuth(auth: ReturnType<typeof natsAuthOptions>): string {
  const kind = auth.authenticator ? "creds" : "user" in auth ? "user/password" : auth.token ? "token" : "none";
  return auth.tls ? `${kind}, tls` : kind;
}
