// Runs the NATS publishes queued during one event-loop turn together, so they leave in one socket
// write. The client flushes after each microtask; messages handled in separate I/O callbacks
// (HTTP requests, webhook responses) would otherwise cost a write each, which the benchmarks
// measured as the largest single cost of both ingest and delivery.
export class TurnBatch {
  #queued: Array<() => void> = [];

  add(work: () => void): void {
    if (this.#queued.push(work) > 1) return;
    setImmediate(() => {
      const queued = this.#queued;
      this.#queued = [];
      for (const run of queued) run();
    });
  }
}
