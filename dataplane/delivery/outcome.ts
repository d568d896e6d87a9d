// What one attempt at one URL came to, and what a delivery round across all URLs comes to. The
// retry decision lives in the type (delivered | retry | permanent), as svix and action-destinations
// do it; the consumer maps it to ack, nak(delay) or the dead-letter queue.

export type AttemptOutcome =
  | { kind: "delivered"; status: number }
  | { kind: "retry"; status?: number; error?: DeliveryErrorCode; retryAfterMs?: number }
  | { kind: "permanent"; status?: number; error?: DeliveryErrorCode };

/** What an attempt without an HTTP status ended in; each is documented in docs/operations.md (a test checks). */
export const DELIVERY_ERROR_CODES = [
  "timeout",
  "connection_refused",
  "connection_reset",
  "dns_error",
  "tls_verification_failed",
  "private_address_refused",
  "network_error",
  /** An answer came that is not HTTP the client can read (bad framing, headers past 64 KiB). */
  "invalid_response",
  /** No request: every URL was pausing (Retry-After, or not answering) for the whole window. */
  "url_paused",
  /** The egress proxy (--egress-proxy) could not be reached, or refused or failed the request. */
  "proxy_error",
] as const;
export type DeliveryErrorCode = (typeof DELIVERY_ERROR_CODES)[number];

/**
 * Retry-After is honoured within these bounds: a receiver cannot stall us for hours, nor make us
 * hammer it. The least is the first backoff step: a receiver answering "Retry-After: 1" to
 * everything had each message sent once a second for its whole retry window.
 */
export const RETRY_AFTER_BOUNDS_MS = { min: 5_000, max: 15 * 60_000 } as const;

/**
 * 2xx delivers. 408, 429 and 5xx are worth retrying; any other status (all 3xx: redirects are
 * never followed; a status past 599, which HTTP does not define) fails that URL for good.
 */
export function classifyStatus(status: number, retryAfter?: string | null, now = Date.now()): AttemptOutcome {
  if (status >= 200 && status < 300) return { kind: "delivered", status };
  if (status === 408 || status === 429 || (status >= 500 && status < 600)) {
    const retryAfterMs = parseRetryAfter(retryAfter, now);
    return retryAfterMs === undefined ? { kind: "retry", status } : { kind: "retry", status, retryAfterMs };
  }
  return { kind: "permanent", status };
}

/**
 * An HTTP date in one of RFC 9110's three forms (IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, the
 * obsolete `Sunday, 06-Nov-94 08:49:37 GMT` and asctime's `Sun Nov  6 08:49:37 1994`): Date.parse
 * alone reads "Fri 2099" as a date too (found by a review: the 15-minute maximum pause).
 */
const HTTP_DATE = new RegExp(
  [
    /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/,
    /^[A-Z][a-z]{5,8}, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT$/,
    /^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/,
  ].map((r) => `(?:${r.source})`).join("|"),
);

/**
 * Seconds or an HTTP date, clamped to RETRY_AFTER_BOUNDS_MS; undefined when absent, unreadable,
 * zero or past ("now" asks for no pause: the backoff applies, as without one). Only the forms of
 * RFC 9110 are read: a number of seconds, digits only, or an HTTP date (HTTP_DATE).
 */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  // asctime's form has no zone: it is GMT.
  const ms = /^\d+$/.test(text) ? Number(text) * 1000 : HTTP_DATE.test(text) ? Date.parse(text.endsWith("GMT") ? text : `${text} GMT`) - now : NaN;
  if (!Number.isFinite(ms) || ms <= 0) return undefined;
  return Math.min(RETRY_AFTER_BOUNDS_MS.max, Math.max(RETRY_AFTER_BOUNDS_MS.min, ms));
}

/**
 * Combines the URLs' outcomes: one delivery is enough; otherwise retry while any URL may still
 * succeed (the first retryable outcome stands for the round), else permanent.
 */
export function combine(outcomes: AttemptOutcome[]): AttemptOutcome {
  const delivered = outcomes.find((o) => o.kind === "delivered");
  if (delivered) return delivered;
  return outcomes.find((o) => o.kind === "retry") ?? outcomes[0] ?? { kind: "permanent", error: "network_error" };
}

/**
 * The wait before a message's next round: the backoff, or longer while every URL still worth
 * trying is pausing (what is left of its Retry-After, or of the breaker's pause): until the first
 * of them is due. A pause only lengthens the wait. When the soonest pause decided it, a receiver
 * answering every request with `Retry-After: 7` had each message sent every 7 s for its whole
 * window, all at once as each pause ended (4,208 requests in 6 minutes in a soak test, against 220
 * without the header), and rounds paced by the breaker used up the backoff's steps within 90 s,
 * leaving the next try 30 minutes away. The worker skips a URL in any round that comes before its
 * pause ends, so every receiver's pause is honoured while the others are retried on the backoff.
 */
export function nextRoundDelayMs(waitsMs: ReadonlyArray<number | undefined>, backoff: number): number {
  let soonest = Infinity;
  for (const wait of waitsMs) soonest = Math.min(soonest, wait ?? 0);
  return soonest === Infinity ? backoff : Math.max(backoff, soonest);
}

/**
 * Delay before delivery attempt `attempt + 1` (attempt counts from 1): exponential from 5 s,
 * capped at 30 min, and no longer than twice what the message has waited so far (`waitedMs`,
 * since it was stored), with ±20% jitter so retries of many messages do not arrive together,
 * and never past the end of the retry window. On the usual schedule the steps stay within that
 * bound (step k waits 5·2^(k-1) s, having waited 5·(2^(k-1)-1) s); it keeps the wait in step with
 * time when the attempt count runs ahead: deliveries that a URL's pause held back without a
 * request count as attempts on every replica (a soak test saw a message 30 minutes from its next
 * try after 90 s).
 */
export function backoffMs(attempt: number, remainingWindowMs: number, random: () => number = Math.random, waitedMs = Infinity): number {
  const base = Math.min(30 * 60_000, 5_000 * 2 ** Math.max(0, attempt - 1), Math.max(5_000, 2 * waitedMs));
  const jittered = base * (0.8 + 0.4 * random());
  return Math.round(Math.max(0, Math.min(jittered, remainingWindowMs)));
}
