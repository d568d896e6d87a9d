// One attempt at POSTing a webhook body to one URL, over a keep-alive undici Agent, reduced to an
// AttemptOutcome. Redirects are never followed, TLS is always verified, the whole exchange has one
// deadline, only the first bytes of the answer are kept, and send() never throws: every failure is
// an outcome the worker can record and act on.
import { getCACertificates } from "node:tls";
import { performance } from "node:perf_hooks";
import type { IncomingHttpHeaders } from "node:http";
import { isIP, type LookupFunction } from "node:net";
import { Agent, type Dispatcher } from "undici";
import { classifyStatus, type AttemptOutcome, type DeliveryErrorCode } from "./outcome.ts";
import { DnsCache } from "./dns-cache.ts";
import { bareHost, checkUrlHost, guardLookup, PrivateAddressError, urlReachesOnlyPrivate } from "./ssrf.ts";
import { isProxyFailure, proxiedAgent, type EgressProxy } from "./egress-proxy.ts";

export interface SenderOptions {
  allowPrivateNetworks: boolean;
  userAgent: string;
  /** connections per origin (default MAX_CONNECTIONS_PER_ORIGIN) */
  connections?: number;
  /** CA certificates to trust in addition (tests) */
  ca?: string | Buffer;
  /** An HTTP proxy every webhook goes through (egressProxy()); none by default. */
  proxy?: EgressProxy;
}

export interface SendRequest {
  /**
   * Whose request this is (a destination): each has connections of its own, so that one
   * destination's slow answers cannot keep another's requests waiting for a connection to a host
   * both use (a shared gateway, hooks.zapier.com).
   */
  pool: string;
  url: string;
  body: Uint8Array;
  headers: Record<string, string>;
  timeoutMs: number;
}

export interface SendResult {
  url: string;
  outcome: AttemptOutcome;
  latencyMs: number;
  /** What the HTTP client said of a failure without an answer (code: message), for the attempt record. */
  detail?: string;
  /** first bytes of the response body, at most 512, as UTF-8 */
  responseSnippet?: string;
}

/** Bytes of the response kept for the attempt record; enough to see an error message, too little to hurt. */
export const SNIPPET_BYTES = 512;

// After the snippet, up to this much more is read and discarded so the connection can be reused;
// a longer body costs a new connection rather than memory or time.
const DRAIN_LIMIT_BYTES = 64 * 1024;

/**
 * Once the status line is in, the rest of the answer gets this long (within the deadline); then
 * the attempt is settled with the status and the connection dropped. The status decides the
 * outcome: a body that trickles in (a byte a second) must not hold a delivery slot and a socket
 * per attempt until the deadline. One tenant's such receivers held ~4,500 sockets of a deliver
 * process and slowed every other destination's deliveries to seconds (found by a review).
 */
export const BODY_GRACE_MS = 1_000;

/**
 * Connections one destination keeps to one origin (scheme, host and port) in one process; requests
 * beyond wait for one, within their deadline. undici's pool looks for a free connection by walking
 * all of an origin's connections at every request: with thousands (a tenant's receivers trickling
 * their answers, every connection dropped and made again) a deliver process spent most of its CPU
 * walking them, and every destination's deliveries waited seconds (found by a review).
 */
export const MAX_CONNECTIONS_PER_ORIGIN = 256;

/**
 * Response headers accepted, in bytes: Node's 16 KiB default refused real answers (a receiver
 * behind a gateway that sets large cookies), and a refused 200 is sent again for hours.
 */
export const MAX_RESPONSE_HEADER_BYTES = 64 * 1024;

/** A destination's connections are closed once it has sent nothing for this long. */
const IDLE_POOL_MS = 5 * 60_000;

export class WebhookSender {
  readonly #pools = new Map<string, { agent: Dispatcher; usedAt: number }>();
  readonly #newAgent: () => Dispatcher;
  readonly #allowPrivateNetworks: boolean;
  /** With a proxy: the private-address check of names, which the guard at connect no longer sees. */
  readonly #checkName: ((url: URL) => Promise<AttemptOutcome | undefined>) | undefined;
  readonly #userAgent: string;
  readonly #targets = new Map<string, URL | AttemptOutcome>();
  readonly #sweep: NodeJS.Timeout;

  constructor(options: SenderOptions) {
    this.#allowPrivateNetworks = options.allowPrivateNetworks;
    this.#userAgent = options.userAgent;
    const dns = new DnsCache();
    // Node's `ca` replaces the trusted roots; keep the defaults so an extra CA only adds trust.
    const ca = options.ca !== undefined ? [...getCACertificates("default"), options.ca] : undefined;
    const agentOptions: Agent.Options = {
      connections: options.connections ?? MAX_CONNECTIONS_PER_ORIGIN,
      maxHeaderSize: MAX_RESPONSE_HEADER_BYTES,
      connect: {
        // Names are looked up through one cache per sender (one tenant's slow DNS must not hold
        // up the others: dns-cache.ts). The guard judges the addresses actually dialled, so a
        // name that re-resolves to a private address between config check and send (DNS
        // rebinding) is still refused.
        lookup: options.allowPrivateNetworks ? dns.lookupFunction : guardLookup(dns.lookupFunction),
        ...(ca ? { ca } : {}),
      },
    };
    const { proxy } = options;
    this.#newAgent = proxy ? () => proxiedAgent(proxy, agentOptions, ca) : () => new Agent(agentOptions);
    this.#checkName = proxy && !options.allowPrivateNetworks ? refusePrivateNames(guardLookup(dns.lookupFunction)) : undefined;
    this.#sweep = setInterval(() => this.#closeIdlePools(), IDLE_POOL_MS).unref();
  }

  #agent(pool: string): Dispatcher {
    let entry = this.#pools.get(pool);
    if (!entry) this.#pools.set(pool, (entry = { agent: this.#newAgent(), usedAt: 0 }));
    entry.usedAt = performance.now();
    return entry.agent;
  }

  /** A removed or quiet destination's connections; nothing of it is in flight after IDLE_POOL_MS. */
  #closeIdlePools(): void {
    const now = performance.now();
    for (const [pool, { agent, usedAt }] of this.#pools) {
      if (now - usedAt < IDLE_POOL_MS) continue;
      this.#pools.delete(pool);
      void agent.close();
    }
  }

  send(req: SendRequest): Promise<SendResult> {
    const started = performance.now();
    const url = this.#target(req.url);
    if (!(url instanceof URL)) return Promise.resolve({ url: req.url, outcome: url, latencyMs: performance.now() - started });
    return new Promise((resolve) => {
      // Armed first: the deadline covers the name check too, as it covers the lookup at connect.
      const exchange = new Exchange(req, started, resolve);
      if (!this.#checkName || isIP(bareHost(url)) !== 0) return this.#dispatch(req, url, exchange);
      void this.#checkName(url).then((refused) => {
        if (refused) exchange.refuse(refused);
        else if (!exchange.expired) this.#dispatch(req, url, exchange);
      });
    });
  }

  #dispatch(req: SendRequest, url: URL, exchange: Exchange): void {
    // undici's dispatch() rather than request(): request() wraps every answer in a Readable
    // stream and the deadline in an AbortSignal, which cost ~10 µs of CPU per attempt (a third
    // of the attempt) in bench/delivery.ts. A handler of our own keeps only what we need.
    // undici documents dispatch() as its lower-level API, free to change in a major release:
    // test/delivery/sender.test.ts covers every behaviour of this handler against real servers.
    try {
      this.#agent(req.pool).dispatch(
        { origin: url.origin, path: `${url.pathname}${url.search}`, method: "POST", headers: this.#headers(req.headers), body: req.body },
        exchange,
      );
    } catch (err) {
      // Refused before anything was sent (undici checks some arguments at once): an outcome
      // like any other, as send() never throws.
      exchange.onResponseError(null, err as Error);
    }
  }

  /**
   * The parsed URL, or the outcome that refuses it. Both depend only on the URL's text, and a
   * destination sends to the same few URLs all day: each is judged once, not per attempt.
   */
  #target(text: string): URL | AttemptOutcome {
    let target = this.#targets.get(text);
    if (target) return target;
    target = judgeTarget(text, this.#allowPrivateNetworks);
    // Bounded: URLs of removed destinations are not kept forever.
    if (this.#targets.size >= MAX_CACHED_TARGETS) this.#targets.clear();
    this.#targets.set(text, target);
    return target;
  }

  /** Waits for in-flight requests, then closes the pooled connections. */
  async close(): Promise<void> {
    clearInterval(this.#sweep);
    const agents = [...this.#pools.values()].map((p) => p.agent);
    this.#pools.clear();
    await Promise.all(agents.map((a) => a.close()));
  }

  /**
   * Header names go out as Segment writes them (`User-Agent`, `Content-Type`, `X-Signature`) and
   * custom ones as configured: HTTP says case does not matter, but receivers read them from maps
   * that keep the sender's case (PHP's getallheaders(), API Gateway's REST proxy events), and one
   * written for Segment looks up `X-Signature`.
   */
  #headers(custom: Record<string, string>): Record<string, string> {
    const headers: Record<string, string> = {};
    let userAgent = this.#userAgent;
    for (const [name, value] of Object.entries(custom)) {
      const lower = name.toLowerCase();
      // A caller's User-Agent (any case) replaces ours instead of going out beside it. The body
      // is always JSON; a custom Content-Type must not make the receiver parse it as something else.
      if (lower === "user-agent") userAgent = value;
      else if (lower !== "content-type") headers[name] = value;
    }
    headers["User-Agent"] = userAgent;
    headers["Content-Type"] = "application/json";
    return headers;
  }
}

const MAX_CACHED_TARGETS = 1024;

function judgeTarget(text: string, allowPrivateNetworks: boolean): URL | AttemptOutcome {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { kind: "permanent", error: "network_error" }; // no retry can fix an unparseable URL
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return { kind: "permanent", error: "network_error" };
  if (!allowPrivateNetworks) {
    // IP literals are dialled without a lookup, so the connect-time guard never sees them.
    try {
      checkUrlHost(url);
    } catch (err) {
      return outcomeOfError(err, false);
    }
  }
  return url;
}

/**
 * With a proxy, the proxy resolves the receiver's name and delivery dials only the proxy: the
 * name is looked up here first, and refused if it resolves to a private address, or if its text
 * says it can only be one (localhost, *.localhost, cluster names) whether or not it resolves
 * here. A name that does not resolve here is left to the proxy (in clusters where only the proxy
 * resolves outside names): its own rules decide then, as they do for a name that changes between
 * the two lookups.
 */
function refusePrivateNames(lookup: LookupFunction): (url: URL) => Promise<AttemptOutcome | undefined> {
  const refused: AttemptOutcome = { kind: "permanent", error: "private_address_refused" };
  return (url) =>
    new Promise((resolve) => {
      if (urlReachesOnlyPrivate(url)) return resolve(refused);
      lookup(url.hostname, { all: true }, (err) => resolve(err instanceof PrivateAddressError ? refused : undefined));
    });
}

/**
 * One attempt as undici sees it: a DispatchHandler that settles the attempt's promise once, with
 * the outcome of the status (after the first SNIPPET_BYTES of the answer, or its end), of an
 * error, or of the deadline. One deadline covers connect, headers and snippet, as receivers are
 * told: answer within timeoutMs. It stays armed while the rest of the answer is drained, so
 * draining cannot outlive it either; an answer whose body is not in with its status line gets
 * BODY_GRACE_MS more at most.
 */
class Exchange implements Dispatcher.DispatchHandler {
  readonly #url: string;
  readonly #started: number;
  readonly #settle: (result: SendResult) => void;
  readonly #deadline: number;
  #timer: NodeJS.Timeout;
  #controller: Dispatcher.DispatchController | undefined;
  #settled = false;
  #expired = false;
  #finished = false;
  #outcome: AttemptOutcome | undefined;
  #chunks: Buffer[] = [];
  #received = 0;

  constructor(req: SendRequest, started: number, settle: (result: SendResult) => void) {
    this.#url = req.url;
    this.#started = started;
    this.#settle = settle;
    this.#deadline = started + req.timeoutMs;
    this.#timer = setTimeout(() => this.#expire(req.timeoutMs), req.timeoutMs);
  }

  /**
   * Run once the bytes that brought the status line are parsed: nearly every answer has ended by
   * then, and pays for no second timer.
   */
  static #limitBody(exchange: Exchange): void {
    if (exchange.#finished || exchange.#deadline - performance.now() <= BODY_GRACE_MS) return;
    clearTimeout(exchange.#timer);
    exchange.#timer = setTimeout(Exchange.#cutBody, BODY_GRACE_MS, exchange);
  }

  static #cutBody(exchange: Exchange): void {
    exchange.#done(exchange.#outcome!, exchange.#snippet());
    exchange.#controller?.abort(new Error(`answer body not complete ${BODY_GRACE_MS} ms after its status`));
  }

  /** Whether the deadline has passed (the attempt is then settled as a timeout). */
  get expired(): boolean {
    return this.#expired;
  }

  /** Settles the attempt without a request (refused before one was made). */
  refuse(outcome: AttemptOutcome): void {
    this.#finish();
    this.#done(outcome);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    // A request that waited for a connection past its deadline is dropped before it is sent.
    if (this.#expired) controller.abort(new Error("deadline passed before the request was sent"));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return; // 1xx informational answers come before the real one
    const retryAfter = headers["retry-after"];
    this.#outcome = classifyStatus(statusCode, Array.isArray(retryAfter) ? retryAfter[0] : retryAfter);
    process.nextTick(Exchange.#limitBody, this);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#received < SNIPPET_BYTES) this.#chunks.push(chunk);
    this.#received += chunk.length;
    // Enough for the record: the attempt is over for the worker; the rest is drained for reuse
    // of the connection, up to a limit past which the connection is dropped instead.
    if (this.#received >= SNIPPET_BYTES && !this.#settled) this.#done(this.#outcome!, this.#snippet());
    if (this.#received > SNIPPET_BYTES + DRAIN_LIMIT_BYTES) controller.abort(new Error("answer too long to drain"));
  }

  onResponseEnd(): void {
    this.#finish();
    this.#done(this.#outcome!, this.#snippet());
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, error: Error): void {
    this.#finish();
    // A status already received is the answer (a 200 whose body breaks off is delivered: sending
    // it again would duplicate it); before that, the error decides.
    if (this.#outcome) return this.#done(this.#outcome, this.#snippet());
    this.#done(outcomeOfError(error, this.#expired), undefined, this.#expired ? undefined : errorDetail(error));
  }

  #expire(timeoutMs: number): void {
    this.#expired = true;
    const error = new Error(`no answer within ${timeoutMs} ms`);
    // As in onResponseError: a receiver that sent its status in time answered in time, however
    // slowly the body follows.
    this.#done(this.#outcome ?? outcomeOfError(error, true), this.#snippet());
    if (!this.#finished) this.#controller?.abort(error);
  }

  #finish(): void {
    this.#finished = true;
    clearTimeout(this.#timer);
  }

  #snippet(): string | undefined {
    if (this.#chunks.length === 0) return undefined;
    // A multi-byte character cut at the limit decodes as U+FFFD, which is fine for a log snippet.
    const bytes = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks);
    return bytes.subarray(0, SNIPPET_BYTES).toString("utf8") || undefined;
  }

  #done(outcome: AttemptOutcome, responseSnippet?: string, detail?: string): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#chunks = [];
    const result: SendResult = { url: this.#url, outcome, latencyMs: performance.now() - this.#started };
    if (responseSnippet) result.responseSnippet = responseSnippet;
    if (detail) result.detail = detail;
    this.#settle(result);
  }
}

// OpenSSL's certificate verification failures, as Node reports them in `code`.
const TLS_VERIFY_CODES = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT", "SELF_SIGNED_CERT_IN_CHAIN", "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY", "UNABLE_TO_GET_CRL",
  "UNABLE_TO_DECRYPT_CERT_SIGNATURE", "UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY", "INVALID_CA", "INVALID_PURPOSE",
  "PATH_LENGTH_EXCEEDED", "HOSTNAME_MISMATCH", "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/** Maps whatever undici, net, tls or dns threw to an outcome; `aborted` says our deadline fired. */
export function outcomeOfError(err: unknown, aborted: boolean): AttemptOutcome {
  const errors = causeChain(err);
  const codes = new Set(errors.map((e) => (e as { code?: unknown }).code).filter((c): c is string => typeof c === "string"));
  const retry = (error: DeliveryErrorCode): AttemptOutcome => ({ kind: "retry", error });

  // The guard's refusal arrives from connect(), wrapped or not; it is a config problem, not a blip.
  if (errors.some((e) => e instanceof PrivateAddressError) || codes.has("private_address_refused")) {
    return { kind: "permanent", error: "private_address_refused" };
  }
  // Anything that surfaces after our deadline fired (a socket torn down mid-read, say) is the timeout.
  if (aborted) return retry("timeout");
  // The egress proxy failed us, not the receiver: retried, as the proxy or its settings can be
  // fixed within the retry window.
  if (errors.some(isProxyFailure)) return retry("proxy_error");
  // Retryable: the receiver may renew or fix its certificate within the retry window.
  if ([...codes].some((c) => TLS_VERIFY_CODES.has(c) || c.startsWith("CERT_"))) return retry("tls_verification_failed");
  // DNS first: a DNS server that refuses queries is ECONNREFUSED too (the cause of our EAI_AGAIN),
  // and must not be blamed on the receiver.
  if (["ENOTFOUND", "EAI_AGAIN", "EAI_FAIL", "EAI_NODATA", "ENODATA"].some((c) => codes.has(c))) return retry("dns_error");
  if (codes.has("ECONNREFUSED")) return retry("connection_refused");
  if (["UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "ETIMEDOUT"].some((c) => codes.has(c))) {
    return retry("timeout");
  }
  // UND_ERR_SOCKET is undici's "other side closed": the receiver hung up mid-exchange.
  if (["ECONNRESET", "EPIPE", "ECONNABORTED", "UND_ERR_SOCKET"].some((c) => codes.has(c))) return retry("connection_reset");
  // An answer the parser cannot read (llhttp's HPE_* codes: a repeated Content-Length, both
  // Content-Length and Transfer-Encoding, a status line that is not HTTP) or headers past
  // MAX_RESPONSE_HEADER_BYTES. The receiver did answer: it is not "not answering", and retried
  // in case a proxy in front of it is to blame.
  if (
    errors.some((e) => (e as Error).name === "HTTPParserError") ||
    ["UND_ERR_HEADERS_OVERFLOW", "UND_ERR_RES_CONTENT_LENGTH_MISMATCH"].some((c) => codes.has(c)) ||
    [...codes].some((c) => c.startsWith("HPE_"))
  ) {
    return retry("invalid_response");
  }
  // A header value undici refuses would be refused on every retry too.
  if (codes.has("UND_ERR_INVALID_ARG")) return { kind: "permanent", error: "network_error" };
  return retry("network_error");
}

/**
 * The deepest error with a code, as `code: message` (ERR_SSL_WRONG_VERSION_NUMBER: an https URL
 * on a plain HTTP port), so an attempt record says more than its error code's class.
 */
export function errorDetail(err: unknown): string | undefined {
  const coded = causeChain(err).filter((e): e is Error & { code: string } => typeof (e as { code?: unknown }).code === "string");
  const e = coded.at(-1) ?? (err instanceof Error ? err : undefined);
  if (!e) return undefined;
  const code = (e as { code?: unknown }).code;
  const label = typeof code === "string" ? code : e.name !== "Error" ? e.name : undefined;
  const text = label !== undefined && !e.message.includes(label) ? `${label}: ${e.message}` : e.message;
  return text.length > 200 ? `${text.slice(0, 199)}…` : text;
}

/** The error, its causes and, for AggregateError (happy-eyeballs connects), the errors it groups. */
function causeChain(err: unknown): object[] {
  const seen: object[] = [];
  const visit = (e: unknown): void => {
    if (typeof e !== "object" || e === null || seen.includes(e) || seen.length > 16) return;
    seen.push(e);
    visit((e as { cause?: unknown }).cause);
    if (e instanceof AggregateError) for (const inner of e.errors) visit(inner);
  };
  visit(err);
  return seen;
}
