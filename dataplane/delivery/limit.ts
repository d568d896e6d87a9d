// A counting semaphore: the process-wide bound on messages in delivery, across all destinations
// (each destination is also bounded by its own maxInFlight through its consumer's max_ack_pending).
export class ConcurrencyLimit {
  readonly max: number;
  #inUse = 0;
  #waiting: Array<() => void> = [];

  constructor(max: number) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`concurrency limit must be a positive integer, got ${max}`);
    this.max = max;
  }

  get inUse(): number {
    return this.#inUse;
  }

  /** Takes a slot if one is free, without waiting (and without a promise); pair a `true` with one release. */
  tryAcquire(): boolean {
    if (this.#inUse >= this.max) return false;
    this.#inUse++;
    return true;
  }

  /** Resolves when a slot is free; pair every acquire with one release. */
  acquire(): Promise<void> {
    if (this.tryAcquire()) return Promise.resolve();
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  release(): void {
    const next = this.#waiting.shift();
    if (next) next(); // the slot passes straight to the next waiter
    else this.#inUse--;
  }
}
