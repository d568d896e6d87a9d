// A line that would repeat for every request or message while something is down (a webhook
// timing out, JetStream not storing) is let through at most once per interval, with the count
// of those held back, so the log says what is going on without flooding the pipeline.

export class LogInterval {
  readonly #intervalMs: number;
  #at = -Infinity;
  #held = 0;

  constructor(intervalMs: number) {
    this.#intervalMs = intervalMs;
  }

  /** How many lines were held back since the last one let through; undefined: hold this one back. */
  pass(now = Date.now()): number | undefined {
    if (now - this.#at < this.#intervalMs) {
      this.#held++;
      return undefined;
    }
    const held = this.#held;
    this.#at = now;
    this.#held = 0;
    return held;
  }
}

/**
 * One LogInterval per key (a source and a reason, an error code): each kind of line gets through
 * once per interval, whatever the others do. Keys come from config and code catalogues, so they
 * are few; the map is cleared if they ever are not.
 */
export class KeyedLogInterval {
  readonly #intervalMs: number;
  readonly #intervals = new Map<string, LogInterval>();

  constructor(intervalMs: number) {
    this.#intervalMs = intervalMs;
  }

  /** As LogInterval.pass, for the lines of this key. */
  pass(key: string, now = Date.now()): number | undefined {
    let interval = this.#intervals.get(key);
    if (!interval) {
      if (this.#intervals.size >= 10_000) this.#intervals.clear();
      interval = new LogInterval(this.#intervalMs);
      this.#intervals.set(key, interval);
    }
    return interval.pass(now);
  }
}
