// Runs the NATS publishes queued during one event-loop turn together, so they leave in one socket
// write. The client flushes after each microtask; messages handled in separate I/O callbacks
// (HTTP requests, webhook responses) would otherwise cost a write each, which the benchmarks
// measured as the largest single cost of both ingest and delivery.
export class TurnBatch {
  #queued: Array<() => void> = [];
  #onError: (err: unknown) => void;

  /** @param onError hears of work that threw; the rest of the turn's work still runs. */
  constructor(onError: (err: unknown) => void = () => {}) {
    this.#onError = onError;
  }

  add(work: () => void): void {
    if (this.#queued.push(work) > 1) return;
    setImmediate(() => this.flush());
  }

  /** Runs what is queued now (shutdown calls it so no ack is left behind). */
  flush(): void {
    const queued = this.#queued;
    this.#queued = [];
    for (const run of queued) {
      try {
        run();
      } catch (err) {
        this.#onError(err);
      }
    }
  }
}
