// Counting on a hot path without prom-client's per-call cost. Counter.inc(labels) builds, sorts
// and validates a label hash on every call (the ingest counts twice per request, delivery twice
// per attempt). A tally keeps a plain number per label combination and hands what it counted to
// the prom-client counter when the registry is collected: a scrape, or a test reading the metric.
// What /metrics shows is therefore exact at every scrape.
import { Counter, type CounterConfiguration } from "prom-client";

type Label = string | number;

interface Cell {
  readonly labels: Record<string, string>;
  pending: number;
  /** Whether the series has been handed to prom-client (a series added at 0 is shown at 0). */
  shown: boolean;
}

/** A prom-client counter with three labels, counted through `add(a, b, c)`. */
export class TalliedCounter<N extends string> {
  readonly counter: Counter<N>;
  readonly #names: readonly [N, N, N];
  // One level per label: the hot path looks up values it already holds, and builds no key.
  readonly #cells = new Map<Label, Map<Label, Map<Label, Cell>>>();

  constructor(config: Omit<CounterConfiguration<N>, "labelNames" | "collect"> & { labelNames: readonly [N, N, N] }) {
    this.#names = config.labelNames;
    const drain = () => this.#drainInto(this.counter);
    this.counter = new Counter({ ...config, collect: drain });
  }

  /** Counts; `add(a, b, c, 0)` makes the series exist at 0 (see DeliveryMetrics.destinationStarted). */
  add(a: Label, b: Label, c: Label, count = 1): void {
    let byB = this.#cells.get(a);
    if (!byB) this.#cells.set(a, (byB = new Map()));
    let byC = byB.get(b);
    if (!byC) byB.set(b, (byC = new Map()));
    let cell = byC.get(c);
    if (!cell) {
      const [na, nb, nc] = this.#names;
      byC.set(c, (cell = { labels: { [na]: String(a), [nb]: String(b), [nc]: String(c) }, pending: 0, shown: false }));
    }
    cell.pending += count;
  }

  /** Drops every series whose first label is `a` (a source or destination long gone). */
  forget(a: Label): void {
    const byB = this.#cells.get(a);
    if (!byB) return;
    this.#cells.delete(a);
    for (const byC of byB.values()) for (const cell of byC.values()) this.counter.remove(cell.labels as Partial<Record<N, string>>);
  }

  #drainInto(counter: Counter<N>): void {
    for (const byB of this.#cells.values()) {
      for (const byC of byB.values()) {
        for (const cell of byC.values()) {
          if (cell.pending === 0 && cell.shown) continue;
          counter.inc(cell.labels as Partial<Record<N, string>>, cell.pending);
          cell.pending = 0;
          cell.shown = true;
        }
      }
    }
  }
}
