// Delivery through an egress proxy, for clusters that let nothing out otherwise: the flags read
// once at start, the undici dispatcher that goes through the proxy, and how the proxy's failures
// are told apart from the receivers'.
import { EnvHttpProxyAgent, Pool, type Agent, type Dispatcher } from "undici";

/**
 * Where delivery's requests go when the cluster lets them out only through a proxy. Named
 * explicitly (`--egress-proxy`), never read from HTTPS_PROXY: the proxy resolves the receivers'
 * names, and so takes over part of the private-address check (docs/operations.md, "Egress").
 */
export interface EgressProxy {
  /**
   * `http://` or `https://` URL of the proxy, with credentials if it wants them. https receivers
   * are reached through a CONNECT tunnel (TLS end to end, verified as ever), http ones by
   * absolute-form requests.
   */
  readonly url: string;
  /** Hosts reached directly, as NO_PROXY lists them: `host`, `.domain`, `*.domain`, `host:port`, IPs. */
  readonly noProxy: readonly string[];
}

/** A bad --egress-proxy or --egress-no-proxy: said at start, before anything is sent. */
export class InvalidEgressProxyError extends Error {
  readonly code = "TRACKHOOK_INVALID_EGRESS_PROXY";
  constructor(message: string) {
    super(message);
    this.name = "InvalidEgressProxyError";
  }
}

// A name or an IPv4 address, with an optional leading `.` or `*.` and an optional port; an IPv6
// address (bracketed when a port follows); or `*`.
const NO_PROXY_ENTRY = /^(\*|(\*\.|\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)$/;

/** The proxy's settings, checked once, at start. */
export function egressProxy(url: string, noProxy: readonly string[] = []): EgressProxy {
  const parsed = URL.parse(url);
  if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:") || !parsed.hostname) {
    throw new InvalidEgressProxyError(`--egress-proxy: ${redactProxyUrl(url)} is not the http:// or https:// URL of a proxy (such as http://proxy.example:3128)`);
  }
  try {
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
  } catch {
    // undici decodes them for Proxy-Authorization, and would fail every attempt instead.
    throw new InvalidEgressProxyError(`--egress-proxy: ${redactProxyUrl(url)} has credentials that are not valid percent-encoding: write % as %25 (and / ? # @ : as %2F %3F %23 %40 %3A)`);
  }
  if (parsed.pathname !== "/" || parsed.search || parsed.hash) {
    throw new InvalidEgressProxyError(`--egress-proxy: ${redactProxyUrl(url)} has a path, query or fragment; a proxy is named by scheme, host and port only`);
  }
  for (const entry of noProxy) {
    if (!NO_PROXY_ENTRY.test(entry)) {
      throw new InvalidEgressProxyError(`--egress-no-proxy: "${entry}" is not a host, .domain, *.domain, IP address or host:port`);
    }
  }
  return Object.freeze({ url, noProxy: Object.freeze([...noProxy]) });
}

/** The proxy's URL without the credentials it may hold, for logs and errors. */
export function redactProxyUrl(url: string): string {
  const parsed = URL.parse(url);
  // Not a URL (a password with a raw "/", say): shown without anything before its last "@"
  // beyond the scheme, where credentials would be.
  if (!parsed || !parsed.host) {
    const at = url.lastIndexOf("@");
    return JSON.stringify(at < 0 ? url : `${/^[a-z][a-z0-9+.-]*:\/\//i.exec(url)?.[0] ?? ""}…${url.slice(at)}`);
  }
  const credentials = parsed.username !== "" || parsed.password !== "";
  return `${parsed.protocol}//${credentials ? "…@" : ""}${parsed.host}`;
}

/** Marks an error of the connection to the proxy itself. */
const PROXY_FAILURE = Symbol("trackhook.proxyFailure");

function markProxyFailure(err: unknown): void {
  if (typeof err === "object" && err !== null && !(PROXY_FAILURE in err)) Object.defineProperty(err, PROXY_FAILURE, { value: true });
}

type Connector = (options: object, callback: (err: Error | null, socket: unknown) => void) => void;

function markingFailures(connect: unknown): unknown {
  if (typeof connect !== "function") return connect;
  const marked: Connector = (options, callback) =>
    (connect as Connector)(options, (err, socket) => {
      markProxyFailure(err);
      callback(err, socket);
    });
  return marked;
}

/**
 * One destination's dispatcher through the proxy (its noProxy hosts directly, with the usual
 * guard at connect). Failures of the connection to the proxy are marked (isProxyFailure), so
 * that a proxy that is down is not taken for a receiver refusing connections.
 */
export function proxiedAgent(proxy: EgressProxy, options: Agent.Options, ca: Array<string | Buffer> | undefined): Dispatcher {
  const proxyOrigin = new URL(proxy.url).origin;
  const tls = ca ? { ca } : undefined;
  const withMarks = (opts: Pool.Options): Pool.Options => ({ ...opts, connect: markingFailures(opts.connect) as Pool.Options["connect"] });
  return new EnvHttpProxyAgent({
    ...options,
    // All three given, so that HTTP_PROXY, HTTPS_PROXY and NO_PROXY in the environment are never read.
    httpProxy: proxy.url,
    httpsProxy: proxy.url,
    noProxy: proxy.noProxy.join(","),
    ...(tls ? { requestTls: tls, proxyTls: tls } : {}),
    // The connections that carry CONNECT tunnels.
    clientFactory: (origin: string | URL, opts: Pool.Options) => tunnelPool(origin, withMarks(opts)),
    // The connections that carry http receivers' absolute-form requests (as many as to a
    // receiver), and those to noProxy hosts and through tunnels (as they are).
    factory: (origin: string | URL, opts: Pool.Options) =>
      new Pool(origin, new URL(origin).origin === proxyOrigin ? withMarks({ connections: options.connections, maxHeaderSize: options.maxHeaderSize, ...opts }) : opts),
  } as EnvHttpProxyAgent.Options);
}

/**
 * How long the proxy gets to answer a CONNECT. (An http request through it ends at the attempt's
 * deadline, up to 30 s, like one sent directly.) Without
 * a limit of its own (undici's default is 300 s), a proxy that takes connections and never
 * answers held every later request to that receiver, and the pod's shutdown, for 5 minutes
 * (found by a review); the attempt itself ends at its deadline in any case.
 */
const PROXY_ANSWER_MS = 10_000;

/** The pool that sends CONNECT to the proxy: its failures, answered or not, are the proxy's. */
function tunnelPool(origin: string | URL, options: Pool.Options): Pool {
  const pool = new Pool(origin, { ...options, headersTimeout: PROXY_ANSWER_MS });
  const connect = pool.connect.bind(pool) as (options: Dispatcher.ConnectOptions) => Promise<Dispatcher.ConnectData>;
  Object.assign(pool, {
    connect: (opts: Dispatcher.ConnectOptions) =>
      connect(opts).catch((err: unknown) => {
        markProxyFailure(err);
        throw err;
      }),
  });
  return pool;
}

// What undici says when the proxy answers CONNECT with other than 200 (a 403 of its rules, a 502
// when it could not reach the receiver), or an absolute-form request with 407.
const PROXY_ANSWER = /^Proxy (response \(\d+\)|Authentication Required)/;
const PROXY_ERROR_NAMES = new Set(["ProxyConnectionError", "SecureProxyConnectionError"]);

/** Whether an error (one of a failure's causes) is the proxy's rather than the receiver's. */
export function isProxyFailure(e: object): boolean {
  return PROXY_FAILURE in e || PROXY_ERROR_NAMES.has((e as Error).name) || PROXY_ANSWER.test(String((e as Error).message));
}
