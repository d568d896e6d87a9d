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
    const now = this.#now();
    let bucket = this.#buckets.get(sourceId);
    if (!bucket || bucket.perSecond !== limit.perSecond || bucket.burst !== limit.burst) {
      // A new or changed limit starts full: a change is a decision to let the source send.
      bucket = { perSecond: limit.perSecond, burst: limit.burst, tokens: limit.burst, at: now };
      this.#buckets.set(sourceId, bucket);
    } else {
      bucket.tokens = Math.min(bucket.burst, bucket.tokens + ((now - bucket.at) / 1000) * bucket.perSecond);
      bucket.at = now;
    }
    if (bucket.tokens < 1) {
      // Retry-After is in whole seconds; rounding up keeps a retry from coming back too early.
      return Math.max(1, Math.ceil((1 - bucket.tokens) / bucket.perSecond));
    }
    bucket.tokens -= count;
    return undefined;
  }

  /** Forgets the buckets of sources that are gone from the config or no longer limited. */
  retain(sources: readonly CompiledSource[]): void {
    const limited = new Set(sources.filter((s) => s.enabled && s.rateLimit).map((s) => `${s.namespace}/${s.name}`));
    for (const id of this.#buckets.keys()) if (!limited.has(id)) this.#buckets.delete(id);
  }
}
