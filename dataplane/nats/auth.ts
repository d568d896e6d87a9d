// How every component authenticates to NATS and verifies its TLS, from the environment: secrets
// belong in files and environment variables a Secret fills, never on a command line that `ps`
// shows or in a URL that ends up in logs.
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { checkServerIdentity, type PeerCertificate } from "node:tls";
import { credsAuthenticator, type ConnectionOptions } from "@nats-io/transport-node";

export class NatsAuthError extends Error {
  readonly code = "TRACKHOOK_NATS_AUTH";
}

/** The variables read, documented in docs/operations.md and the chart. */
export const NATS_AUTH_ENV = {
  creds: "TRACKHOOK_NATS_CREDS", // path of a .creds file (JWT + nkey seed), decentralised auth
  user: "TRACKHOOK_NATS_USER",
  password: "TRACKHOOK_NATS_PASSWORD",
  token: "TRACKHOOK_NATS_TOKEN",
  ca: "TRACKHOOK_NATS_CA", // PEM CA file verifying the server (tls:// URLs)
  cert: "TRACKHOOK_NATS_CERT", // PEM client certificate for mutual TLS
  key: "TRACKHOOK_NATS_KEY",
} as const;

/**
 * Connection options for the credentials and TLS files named in `env`; validated up front. A
 * `tls://` URL among `servers` requires TLS: nats.js reads the scheme as a hint only, and would
 * send the user and password in the clear to a server (or anyone between) that offers no TLS
 * (found by a CLI review).
 */
export function natsAuthOptions(env: NodeJS.ProcessEnv = process.env, servers = ""): Partial<ConnectionOptions> {
  const get = (name: string) => env[name] || undefined;
  const creds = get(NATS_AUTH_ENV.creds);
  const user = get(NATS_AUTH_ENV.user);
  const password = get(NATS_AUTH_ENV.password);
  const token = get(NATS_AUTH_ENV.token);
  const methods = [creds && NATS_AUTH_ENV.creds, user && NATS_AUTH_ENV.user, token && NATS_AUTH_ENV.token].filter(Boolean);
  if (methods.length > 1) throw new NatsAuthError(`set only one of ${methods.join(", ")}`);
  if (Boolean(user) !== Boolean(password)) throw new NatsAuthError(`${NATS_AUTH_ENV.user} and ${NATS_AUTH_ENV.password} go together`);

  const options: Partial<ConnectionOptions> = {};
  if (creds) {
    const bytes = readable(creds, NATS_AUTH_ENV.creds);
    options.authenticator = credsAuthenticator(bytes);
  }
  if (user) Object.assign(options, { user, pass: password });
  if (token) options.token = token;

  const ca = get(NATS_AUTH_ENV.ca);
  const cert = get(NATS_AUTH_ENV.cert);
  const key = get(NATS_AUTH_ENV.key);
  if (Boolean(cert) !== Boolean(key)) throw new NatsAuthError(`${NATS_AUTH_ENV.cert} and ${NATS_AUTH_ENV.key} go together`);
  if (ca || cert || servers.split(",").some((server) => /^tls:\/\//i.test(server.trim()))) {
    const identity = identityCheckFor(servers);
    options.tls = {
      ...(ca ? { ca: readable(ca, NATS_AUTH_ENV.ca).toString() } : {}),
      ...(cert && key ? { cert: readable(cert, NATS_AUTH_ENV.cert).toString(), key: readable(key, NATS_AUTH_ENV.key).toString() } : {}),
      // nats.js hands Node's TLS everything in `tls`; its type does not list this one.
      ...(identity ? ({ checkServerIdentity: identity } as object) : {}),
    };
  }
  return options;
}

/**
 * nats.js gives Node no server name when it dials a server by IP address, and Node then checks
 * the certificate against "localhost" (nats-io/nats.js#303): a certificate for the address was
 * refused, and one for localhost accepted for any address (found by a review of a VM install).
 * With addresses among the servers, a certificate Node would check against "localhost" must be
 * valid for one of the servers given (localhost only if it is one of them).
 */
function identityCheckFor(servers: string): ((host: string, cert: PeerCertificate) => Error | undefined) | undefined {
  const hosts = servers.split(",").map((server) => hostOf(server.trim())).filter((host) => host !== undefined);
  const addresses = hosts.filter((host) => isIP(host) !== 0);
  if (addresses.length === 0) return undefined;
  return (host, cert) => {
    if (host !== "localhost") return checkServerIdentity(host, cert);
    const candidates = hosts.includes("localhost") ? ["localhost", ...addresses] : addresses;
    const errors = candidates.map((candidate) => checkServerIdentity(candidate, cert));
    return errors.includes(undefined) ? undefined : errors[candidates.indexOf(addresses[0]!)];
  };
}

/** The host of a NATS URL (with or without a scheme), an IPv6 address without its brackets. */
function hostOf(server: string): string | undefined {
  const url = URL.parse(server.includes("://") ? server : `nats://${server}`);
  return url ? url.hostname.replace(/^\[(.*)\]$/, "$1") : undefined;
}

function readable(path: string, variable: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new NatsAuthError(`${variable}: cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/** `nats://user:pw@host` would put a secret in logs (and nats.js ignores it anyway). */
export function assertNoCredentialsInUrl(servers: string): void {
  for (const server of servers.split(",")) {
    // With or without a scheme: "alice:secret@host:4222" carries a password too.
    if (/^(?:[a-z][a-z0-9+.-]*:\/\/)?[^/@\s]*@/i.test(server.trim())) {
      throw new NatsAuthError(`NATS URLs must not carry credentials; use ${NATS_AUTH_ENV.user}/${NATS_AUTH_ENV.password}, ${NATS_AUTH_ENV.token} or ${NATS_AUTH_ENV.creds}`);
    }
  }
}
