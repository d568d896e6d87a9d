// Series of a source or destination that left the config are dropped a while after it went:
// labels naming every source and destination ever configured otherwise grow until a restart (a
// review's 15 minutes of churn left 18,000 delivery series for deleted destinations, 2.2 MB per
// scrape). The wait lets Prometheus scrape the last counts first; a name that comes back in the
// meantime keeps its series.

/** How long a name's series outlive it: longer than any sane scrape interval. */
export const RETIRE_AFTER_MS = 10 * 60_000;

export class LabelRetirement {
  readonly #forget: (name: string) => void;
  readonly #afterMs: number;
  #current = new Set<string>();
  readonly #leaving = new Map<string, NodeJS.Timeout>();

  constructor(forget: (name: string) => void, afterMs = RETIRE_AFTER_MS) {
    this.#forget = forget;
    this.#afterMs = afterMs;
  }

  /** The names in the config now; those that were before and are not any more are retired. */
  inConfig(names: Iterable<string>): void {
    const next = new Set(names);
    for (const name of next) {
      const timer = this.#leaving.get(name);
      if (timer) clearTimeout(timer);
      this.#leaving.delete(name);
    }
    for (const name of this.#current) {
      if (next.has(name) || this.#leaving.has(name)) continue;
      const timer = setTimeout(() => {
        this.#leaving.delete(name);
        this.#forget(name);
      }, this.#afterMs);
      timer.unref();
      this.#leaving.set(name, timer);
    }
    this.#current = next;
  }

  close(): void {
    for (const timer of this.#leaving.values()) clearTimeout(timer);
    this.#leaving.clear();
  }
}
