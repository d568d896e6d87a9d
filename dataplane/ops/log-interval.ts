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
