// Pauses that one destination's messages all respect, per URL: a Retry-After, and a circuit
// breaker for a URL that does not answer at all. Without them every message waited for a dead
// URL's whole timeout (holding its in-flight slot), so one hung backup URL cut a destination to
// maxInFlight / timeout messages a second (20/s) while its other URL answered at once; and a
// receiver that asked for a pause with Retry-After kept getting new messages.
import type { AttemptOutcome, DeliveryErrorCode } from "./outcome.ts";

export interface UrlPauseOptions {
  /** Consecutive attempts without an HTTP answer that open the breaker. */
  threshold: number;
  /** The first pause; each reopening doubles it, up to maxMs. */
  baseMs: number;
  maxMs: number;
}

// At most a minute: the messages holding a destination's slots wait out the pause, so a receiver
// back from an outage got nothing for up to the whole pause (with 5 minutes, 166 s in a review's
// run), while the backlog behind it waited too. One probe a minute is no load on a dead URL.
export const URL_PAUSE_DEFAULTS: UrlPauseOptions = Object.freeze({ threshold: 5, baseMs: 5_000, maxMs: 60_000 });

/**
 * Errors that mean no HTTP answer came: the receiver is down or unreachable, not refusing one
 * message. A certificate that fails verification fails every message alike until it is replaced,
 * and each would cost a TLS handshake: it pauses the URL too.
 */
const UNREACHABLE: ReadonlySet<DeliveryErrorCode> = new Set(["timeout", "connection_refused", "connection_reset", "dns_error", "network_error", "tls_verification_failed", "proxy_error"]);

interface UrlState {
  /** Not sent to before this (ms since the epoch). */
  until: number;
  /** Consecutive attempts without an answer; at `threshold` the breaker is open. */
  unreachable: number;
  /** Times the breaker opened in a row, for the doubling. */
  opened: number;
  /** When the current pause began: results of attempts sent before it say nothing new. */
  since: number;
  /** The answer or error that paused the URL, for a dead letter whose last round sent nothing. */
  cause?: AttemptOutcome;
}

export type PauseChange =
  | { kind: "paused"; reason: "unreachable" | "retry_after"; forMs: number }
  | { kind: "resumed" };

/**
 * A probe is sent once a pause ends; the others wait for its result this long past its timeout
 * (the result is recorded a moment after the timeout fires).
 */
const PROBE_SLACK_MS = 1_000;

export class UrlPauses {
  readonly #options: UrlPauseOptions;
  readonly #urls = new Map<string, UrlState>();

  constructor(options: UrlPauseOptions = URL_PAUSE_DEFAULTS) {
    this.#options = options;
  }

  /** Whether no URL has any state: the common case, checked before anything else. */
  get empty(): boolean {
    return this.#urls.size === 0;
  }

  /** When the URL may next be sent to (0: it may now). Reads only. */
  pausedUntil(url: string, now: number): number {
    const state = this.#urls.get(url);
    return state && state.until > now ? state.until : 0;
  }

  /**
   * The URLs no message is sent to now, and why: while a pause lasts (a breaker's probe in flight
   * included). For the gauge a scrape reads. A breaker whose pause is over waits for the next
   * message to probe it: with no traffic it is not known to be down, and is not listed (listed,
   * a receiver back overnight kept its alert firing until the morning's first message).
   */
  *paused(now: number): Generator<{ url: string; reason: "unreachable" | "retry_after" }> {
    for (const [url, state] of this.#urls) {
      if (state.until > now) yield { url, reason: state.unreachable >= this.#options.threshold ? "unreachable" : "retry_after" };
    }
  }

  /** What paused the URL (its last failure while paused), if it is or was paused. */
  causeOf(url: string): AttemptOutcome | undefined {
    return this.#urls.get(url)?.cause;
  }

  /**
   * Whether a round may send to the URL now. Once a breaker's pause ends, one round is let
   * through to probe it, and the others wait for the probe's result.
   */
  claim(url: string, now: number, probeMs: number): boolean {
    const state = this.#urls.get(url);
    if (!state) return true;
    if (state.until > now) return false;
    if (state.unreachable >= this.#options.threshold) state.until = now + probeMs + PROBE_SLACK_MS;
    return true;
  }

  /**
   * Takes an attempt's outcome into account (`sentAt`: when its round was sent); says when the
   * URL's pause begins or ends, to log.
   */
  note(url: string, outcome: AttemptOutcome, sentAt: number, now: number): PauseChange | undefined {
    const state = this.#urls.get(url);
    const error = "error" in outcome ? outcome.error : undefined;
    const open = state !== undefined && state.unreachable >= this.#options.threshold;
    if (outcome.kind === "retry" && error !== undefined && UNREACHABLE.has(error)) {
      // The other rounds that were in flight when the breaker opened: nothing new about the URL.
      if (state && sentAt < state.since) return undefined;
      const s = state ?? { until: 0, unreachable: 0, opened: 0, since: 0 };
      this.#urls.set(url, s);
      // Only the probe (sent after the pause began) fails while open: it reopens for twice as long.
      if (!open && ++s.unreachable < this.#options.threshold) return undefined;
      const forMs = Math.min(this.#options.maxMs, this.#options.baseMs * 2 ** s.opened);
      s.cause = outcome;
      s.opened++;
      s.until = now + forMs;
      s.since = now;
      return { kind: "paused", reason: "unreachable", forMs };
    }
    if ("status" in outcome && outcome.status !== undefined) {
      // An HTTP answer: the URL is reachable.
      if (outcome.kind === "retry" && outcome.retryAfterMs !== undefined) {
        // Concurrent rounds may each bring a Retry-After: the pause is told once.
        const already = state !== undefined && state.until > now && !open;
        this.#urls.set(url, { until: Math.max(now + outcome.retryAfterMs, already ? state.until : 0), unreachable: 0, opened: 0, since: now, cause: outcome });
        return already ? undefined : { kind: "paused", reason: "retry_after", forMs: outcome.retryAfterMs };
      }
      if (state && (state.until <= now || open)) this.#urls.delete(url);
      else if (state) state.unreachable = 0;
      return open ? { kind: "resumed" } : undefined;
    }
    return undefined;
  }
}
