// One way to connect to NATS for every component: reconnect forever, name the connection,
// report status changes to the logger.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Gauge, type Registry } from "prom-client";
import type { Logger } from "../logging.ts";
import { KeyedLogInterval } from "../telemetry/mod.ts";
import { NatsAuthError, assertNoCredentialsInUrl, natsAuthOptions } from "./auth.ts";

const WAITING_LOG_INTERVAL_MS = 10_000;
/** See connectNats: a server that does not answer two pings in a row is left after ~9 s. */
const PING_INTERVAL_MS = 3_000;
const MAX_PINGS_OUT = 2;
const CONNECT_TIMEOUT_MS = 5_000;
/** An error the server reports comes once per refused operation (each ack, say): one line per kind this often. */
const ERROR_LOG_INTERVAL_MS = 10_000;

/**
 * The oldest nats-server trackhook runs on: a destination's consumer filters several subjects
 * (2.10). Older servers refuse those consumers and nothing is ever delivered (found by a review:
 * Debian's nats-server 2.9, installed as the docs suggested, let `dev` start and deliver nothing).
 */
export const MIN_NATS_SERVER = "2.10.0";
/** The release lines every test runs on (scripts/versions.sh); older ones are allowed, with a warning. */
const TESTED_NATS_SERVER = "2.14.0";

export class NatsServerTooOldError extends Error {
  readonly code = "TRACKHOOK_NATS_SERVER_TOO_OLD";
}

/** -1, 0 or 1 as a is older than, the same as or newer than b (dotted numbers; a suffix such as -beta ignored). */
export function compareVersions(a: string, b: string): number {
  const parts = (v: string) => v.replace(/^v/, "").split(/[-+]/)[0]!.split(".").map((n) => Number.parseInt(n, 10) || 0);
  const [x, y] = [parts(a), parts(b)];
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

/** Refuses a nats-server older than MIN_NATS_SERVER; warns below the versions tested. */
export function checkServerVersion(version: string | undefined, servers: string, log: Logger): void {
  if (!version) return;
  if (compareVersions(version, MIN_NATS_SERVER) < 0) {
    throw new NatsServerTooOldError(
      `nats-server at ${servers} is ${version}; trackhook needs ${MIN_NATS_SERVER} or newer (it is tested on ${TESTED_NATS_SERVER.replace(/\.0$/, "")} and later). ` +
        "Upgrade it (https://github.com/nats-io/nats-server/releases, `brew install nats-server`, or `npm run tools` in a checkout)",
    );
  }
  if (compareVersions(version, TESTED_NATS_SERVER) < 0) log.warn({ servers, version, tested: `>= ${TESTED_NATS_SERVER}` }, "nats-server is older than the versions trackhook is tested on");
}

/** nats.js's refusals of credentials (authorization violation, expired or revoked). */
export function isAuthError(err: unknown): boolean {
  const e = err as { name?: string; code?: string; message?: string } | undefined;
  return e?.name === "AuthorizationError" || /authorization|authentication|permissions violation|expired|revoked/i.test(e?.message ?? "");
}

/**
 * Each component's replies (PubAcks, JetStream API answers, KV watches, pulled messages) come to
 * inboxes of its own. With one shared `_INBOX.>`, any user allowed to subscribe there could read
 * another's replies: ingest, which faces the internet, would see delivery's KV watch of the
 * destination entries, shared secrets included. docs/nats-permissions.conf allows each user its
 * own prefix only.
 */
export const INBOX_PREFIX = {
  ingest: "_INBOX_trackhook_ingest",
  delivery: "_INBOX_trackhook_delivery",
  operator: "_INBOX_trackhook_operator",
} as const;
export type Component = keyof typeof INBOX_PREFIX;

/**
 * The inbox prefix a connection was made with. nats.js's own JetStream and KV code reads it from
 * the connection's options the same way; its public type does not show them.
 */
export function inboxPrefixOf(nc: NatsConnection): string | undefined {
  return (nc as NatsConnection & { options?: { inboxPrefix?: string } }).options?.inboxPrefix;
}

export interface ConnectOptions {
  servers: string;
  name: string;
  log: Logger;
  /** Whose inbox prefix to use; none (`_INBOX`) for `dev`, which runs every component on one connection. */
  component?: Component;
}

export async function connectNats({ servers, name, log, component }: ConnectOptions): Promise<NatsConnection> {
  assertNoCredentialsInUrl(servers);
  const auth = natsAuthOptions(process.env, servers); // a missing creds file fails here, before waiting on NATS
  log.info({ servers, auth: describeAuth(auth) }, "connecting to NATS (waiting until it answers)");
  const options = {
    ...auth,
    servers: servers.split(",").map((s) => s.trim()),
    name,
    ...(component ? { inboxPrefix: INBOX_PREFIX[component] } : {}),
  };
  // Said again while it does not answer, with why, so a wrong URL or an untrusted certificate is
  // not mistaken for a slow start.
  const started = Date.now();
  let stillWaiting = true;
  let probing = false;
  const waiting = setInterval(() => {
    if (probing) return;
    probing = true;
    void whyNotConnecting(options).then((why) => {
      probing = false;
      if (!stillWaiting) return;
      const fields = { servers, waitedSeconds: Math.round((Date.now() - started) / 1000), ...(why ? { err: why.message } : {}) };
      if (why?.tls) log.error(fields, why.tls === "name" ? CERTIFICATE_FOR_ANOTHER_NAME : UNTRUSTED_CERTIFICATE);
      else log.warn(fields, "NATS does not answer yet; still trying (is the URL right?)");
    });
  }, WAITING_LOG_INTERVAL_MS);
  let nc: NatsConnection;
  try {
    nc = await connect({
      ...options,
      maxReconnectAttempts: -1,
      // Pods may start before NATS does; keep trying instead of exiting.
      waitOnFirstConnect: true,
      reconnectTimeWait: 500,
      // A server that stops answering but keeps its socket open (frozen, partitioned, a VM
      // paused) is left after PING_INTERVAL_MS * (MAX_PINGS_OUT + 1), for another node of the
      // cluster. With nats.js's defaults (2 min, 2) a review's frozen node took ingest down for
      // 4+ minutes while the rest of the cluster was healthy.
      pingInterval: PING_INTERVAL_MS,
      maxPingOut: MAX_PINGS_OUT,
      // The frozen server's kernel still accepts connections: a reconnect to it would wait for
      // its greeting this long (nats.js: 20 s) before trying the next.
      timeout: CONNECT_TIMEOUT_MS,
      // An Error per request for async stack traces costs ~40% of publish throughput.
      noAsyncTraces: true,
    });
  } catch (err) {
    // Retrying cannot fix refused credentials: say so plainly (exit 2), not with a stack trace.
    if (isAuthError(err)) throw new NatsAuthError(`NATS at ${servers} refused the credentials: ${(err as Error).message}`);
    throw err;
  } finally {
    clearInterval(waiting);
    stillWaiting = false;
  }
  try {
    checkServerVersion(nc.info?.version, servers, log);
  } catch (err) {
    await nc.close();
    throw err;
  }
  followConnection(nc);
  void (async () => {
    const errorLines = new KeyedLogInterval(ERROR_LOG_INTERVAL_MS);
    for await (const status of nc.status()) {
      if (status.type === "disconnect") log.warn({ nats: status.type, server: status.server }, "NATS connection problem");
      else if (status.type === "reconnect") log.info({ nats: status.type }, "NATS reconnected");
      else if (status.type === "error") logServerError(log, errorLines, status.error);
    }
  })();
  return nc;
}

const UNTRUSTED_CERTIFICATE =
  "NATS's TLS certificate is not trusted; still trying (set TRACKHOOK_NATS_CA to the PEM file of the CA that signed it, or fix the server's certificate)";

const CERTIFICATE_FOR_ANOTHER_NAME =
  "NATS's TLS certificate is not valid for the name or address in the URL; still trying (use a name or address the certificate lists, in --nats or TRACKHOOK_NATS_URL)";

/** Node's codes for a certificate that does not verify (unknown CA, self-signed, expired), and for one of another name. */
const CERTIFICATE_CODE = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ERR_TLS_|ERR_SSL_/;
const OTHER_NAME_CODE = "ERR_TLS_CERT_ALTNAME_INVALID";

/**
 * Why no connection can be made now, from one attempt with the same settings: nats.js's wait for
 * the first connection keeps its errors to itself, and a review's ingest said only "does not
 * answer yet" for ever against a NATS whose certificate it did not trust. Undefined: it connects.
 */
async function whyNotConnecting(options: Parameters<typeof connect>[0]): Promise<{ message: string; tls?: "untrusted" | "name" } | undefined> {
  try {
    const probe = await connect({ ...options, name: `${options?.name ?? "trackhook"} (probe)`, waitOnFirstConnect: false, maxReconnectAttempts: 0, reconnect: false, timeout: CONNECT_TIMEOUT_MS, noAsyncTraces: true });
    await probe.close();
    return undefined;
  } catch (err) {
    const { code, message } = err as Error & { code?: unknown };
    const named = typeof code === "string" ? code : undefined;
    const tls = named === OTHER_NAME_CODE ? "name" : named !== undefined && CERTIFICATE_CODE.test(named) ? "untrusted" : undefined;
    return { message: named && !message.includes(named) ? `${named}: ${message}` : message, ...(tls ? { tls } : {}) };
  }
}

/**
 * An error the server sent on a connection that stays open. A permissions violation is the one to
 * see: the client goes on as if a refused publish (an ack, a record) had been sent.
 */
function logServerError(log: Logger, lines: KeyedLogInterval, error: Error): void {
  const held = lines.pass(error.name);
  if (held === undefined) return;
  if (error.name === "PermissionViolationError") {
    log.error(
      { nats: "error", err: error.message, moreLikeThisSinceLastLine: held },
      "NATS refused an operation this user is not permitted (compare the user's permissions with docs/nats-permissions.conf)",
    );
  } else log.warn({ nats: "error", err: error.message, moreLikeThisSinceLastLine: held }, "NATS reported an error");
}

/**
 * A followed connection: since when (ms) it is between a disconnect and the next reconnect (0
 * while connected), and who waits for it to be up again (natsConnectedWithin).
 */
interface Followed {
  disconnectedSince: number;
  readonly waiters: Set<() => void>;
}
const followed = new WeakMap<NatsConnection, Followed>();

/** Starts following a connection's disconnects and reconnects (once per connection). */
function followConnection(nc: NatsConnection): Followed {
  const known = followed.get(nc);
  if (known) return known;
  const state: Followed = { disconnectedSince: 0, waiters: new Set() };
  followed.set(nc, state);
  const wake = () => [...state.waiters].forEach((waiter) => waiter());
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "disconnect") state.disconnectedSince = Date.now();
      // Followed from after a disconnect, the attempts to reconnect are what says so.
      else if (status.type === "reconnecting" && state.disconnectedSince === 0) state.disconnectedSince = Date.now();
      else if (status.type === "reconnect") {
        state.disconnectedSince = 0;
        wake();
      }
    }
    wake(); // closed: nothing more to wait for
  })();
  return state;
}

/**
 * Resolves true as soon as the connection is up (at once if it is), false after `ms` without a
 * reconnect, once it is closed, or when `cancel` fires (the caller tells which by its signal).
 */
export function natsConnectedWithin(nc: NatsConnection, ms: number, cancel?: AbortSignal): Promise<boolean> {
  const { waiters } = followConnection(nc);
  if (natsDisconnectedForMs(nc) === 0) return Promise.resolve(true);
  if (nc.isClosed() || cancel?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      waiters.delete(done);
      cancel?.removeEventListener("abort", done);
      resolve(natsDisconnectedForMs(nc) === 0 && !cancel?.aborted);
    };
    const timer = setTimeout(done, ms);
    waiters.add(done);
    cancel?.addEventListener("abort", done, { once: true });
  });
}

/** How long the connection has been disconnected (0: connected; Infinity: closed). Followed from the first call on. */
export function natsDisconnectedForMs(nc: NatsConnection): number {
  const since = followConnection(nc).disconnectedSince;
  if (nc.isClosed()) return Infinity;
  return since === 0 ? 0 : Date.now() - since;
}

/**
 * Whether a connection is up: not closed, and not between a disconnect and a reconnect (followed
 * from the first call on). Lets a scrape or a readiness check answer at once instead of waiting
 * for a request's timeout.
 */
export function isNatsConnected(nc: NatsConnection): boolean {
  return natsDisconnectedForMs(nc) === 0;
}

/**
 * `trackhook_nats_connected` on a registry: 1 while the connection is up, 0 otherwise. The one
 * metric that says "NATS is unreachable" while every gauge read from JetStream is missing.
 */
export function natsConnectedGauge(registry: Registry, nc: NatsConnection | (() => NatsConnection | undefined)): void {
  // A getter: registered before the first connection is made, it says 0 while NATS is awaited.
  const current = typeof nc === "function" ? nc : () => nc;
  new Gauge({
    name: "trackhook_nats_connected",
    help: "1 while this process's NATS connection is up, 0 while it is disconnected, closed or not made yet",
    registers: [registry],
    collect() {
      const connection = current();
      this.set(connection && isNatsConnected(connection) ? 1 : 0);
    },
  });
}

/** What kind of credentials are in use, for the log (never their values). */
function describeAuth(auth: ReturnType<typeof natsAuthOptions>): string {
  const kind = auth.authenticator ? "creds" : "user" in auth ? "user/password" : auth.token ? "token" : "none";
  return auth.tls ? `${kind}, tls` : kind;
}
