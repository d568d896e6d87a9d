// Per-source rate limits (Source spec.rateLimit): a token bucket per limited source, in this
// process. Each ingest replica keeps its own, so a source may send up to replicas × the limit in
// all; a shared count would put a NATS round trip in front of every request.
import type { CompiledSource } from "../../schema/mod.ts";

interface Bucket {
  readonly perSecond: number;
  readonly burst: number;
  /** May fall below zero: a request is let through whole while a token is left (see take). */
  tokens: number;
  /** performance.now() when tokens was last brought up to date. */
  at: number;
}

export class SourceRateLimits {
  readonly #buckets = new Map<string, Bucket>();
  readonly #now: () => number;

  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
  }

  /**
   * Takes `count` messages from the source's bucket. Returns undefined when they may go on, or
   * the whole seconds to wait (at least 1) when the source is over its limit.
   *
   * A request goes through whole while the bucket holds a token, and may take it below zero: a
   * batch larger than the burst (2,500 messages against a limit of 100 a second, say) still gets
   * through once, and the source then waits until the debt is paid. Refusing it instead would
   * refuse it for ever, and the SDK would retry it for nothing.
   */
  take(source: CompiledSource, sourceId: string, count: number): number | undefined {
    const limit = source.rateLimit;
    if (!limit) return undefined;
    const bucket = this.#current(sourceId, limit);
    if (bucket.tokens < 1) {
      // Retry-After is in whole seconds; rounding up keeps a retry from coming back too early.
      return Math.max(1, Math.ceil((1 - bucket.tokens) / bucket.perSecond));
    }
    bucket.tokens -= count;
    return undefined;
  }

  /**
   * Gives back what take() counted of messages that were not stored after all (JetStream did not
   * confirm them, or they were duplicates): the SDK retries them, and they would be counted twice.
   */
  giveBack(sourceId: string, count: number): void {
    const bucket = this.#buckets.get(sourceId);
    if (bucket && count > 0) bucket.tokens = Math.min(bucket.burst, bucket.tokens + count);
  }

  /**
   * The source's bucket brought up to now under `limit`: made full if it is new, and made anew if
   * the limit changed, keeping what the source owes (see configure).
   */
  #current(sourceId: string, limit: { perSecond: number; burst: number }): Bucket {
    const now = this.#now();
    const old = this.#buckets.get(sourceId);
    const tokens = old ? Math.min(old.burst, old.tokens + ((now - old.at) / 1000) * old.perSecond) : limit.burst;
    if (old && old.perSecond === limit.perSecond && old.burst === limit.burst) {
      old.tokens = tokens;
      old.at = now;
      return old;
    }
    const bucket = { perSecond: limit.perSecond, burst: limit.burst, tokens: Math.min(limit.burst, tokens), at: now };
    this.#buckets.set(sourceId, bucket);
    return bucket;
  }

  /**
   * Follows a new config: forgets the buckets of sources gone or no longer limited, and switches
   * those whose limit changed at this moment (take() would switch one only at its next request,
   * and count the time between at the old rate). A changed limit keeps what the source owes:
   * lowered in the middle of a flood, a fresh burst would let the flood through once more;
   * raised, the debt is paid at the new rate from now.
   */
  configure(sources: readonly CompiledSource[]): void {
    const limits = new Map(sources.filter((s) => s.enabled && s.rateLimit).map((s) => [`${s.namespace}/${s.name}`, s.rateLimit!]));
    for (const id of [...this.#buckets.keys()]) {
      const limit = limits.get(id);
      if (limit) this.#current(id, limit);
      else this.#buckets.delete(id);
    }
  }
}
