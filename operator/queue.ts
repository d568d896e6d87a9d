// A keyed work queue like client-go's: a key waits in the queue at most once, one reconcile per
// key runs at a time (a change during it re-queues the key once), and failures back off per key.
import type { Logger } from "../dataplane/logging.ts";
import { apiErrorMessage } from "./kube/client.ts";

/** What a reconcile asks for next: nothing, or another look after a delay (polling a condition). */
export type ReconcileResult = { requeueAfterMs?: number } | void;

export interface WorkQueueOptions {
  name: string;
  handler: (key: string) => Promise<ReconcileResult>;
  log: Logger;
  concurrency?: number;
  /** First and longest delay after a failed reconcile. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  onDepth?: (depth: number) => void;
}

export class WorkQueue {
  readonly #options: Required<Omit<WorkQueueOptions, "onDepth">> & Pick<WorkQueueOptions, "onDepth">;
  readonly #queued: string[] = [];
  readonly #queuedSet = new Set<string>();
  readonly #running = new Set<string>();
  /** Keys changed while their reconcile ran: queued again when it ends. */
  readonly #dirty = new Set<string>();
  readonly #failures = new Map<string, number>();
  readonly #timers = new Map<string, NodeJS.Timeout>();
  #active = 0;
  #stopped = false;
  #idle: Array<() => void> = [];

  constructor(options: WorkQueueOptions) {
    this.#options = { concurrency: 2, baseDelayMs: 500, maxDelayMs: 60_000, ...options };
  }

  get depth(): number {
    return this.#queued.length;
  }

  add(key: string): void {
    if (this.#stopped) return;
    if (this.#running.has(key)) {
      this.#dirty.add(key);
      return;
    }
    if (this.#queuedSet.has(key)) return;
    this.#queuedSet.add(key);
    this.#queued.push(key);
    this.#options.onDepth?.(this.#queued.length);
    this.#pump();
  }

  /** Adds the key after a delay; an earlier pending delay for the key wins. */
  addAfter(key: string, ms: number): void {
    if (this.#stopped || this.#timers.has(key)) return;
    const timer = setTimeout(() => {
      this.#timers.delete(key);
      this.add(key);
    }, ms);
    timer.unref();
    this.#timers.set(key, timer);
  }

  /** Stops taking work and waits for the reconciles that are running. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
    this.#queued.length = 0;
    this.#queuedSet.clear();
    if (this.#active > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
  }

  #pump(): void {
    while (!this.#stopped && this.#active < this.#options.concurrency && this.#queued.length > 0) {
      const key = this.#queued.shift()!;
      this.#queuedSet.delete(key);
      this.#options.onDepth?.(this.#queued.length);
      this.#active++;
      this.#running.add(key);
      void this.#run(key);
    }
  }

  async #run(key: string): Promise<void> {
    try {
      this.#options.log.debug({ queue: this.#options.name, key }, "reconciling");
      const result = await this.#options.handler(key);
      this.#failures.delete(key);
      if (result?.requeueAfterMs !== undefined) this.addAfter(key, result.requeueAfterMs);
    } catch (err) {
      const failures = (this.#failures.get(key) ?? 0) + 1;
      this.#failures.set(key, failures);
      const delay = Math.min(this.#options.maxDelayMs, this.#options.baseDelayMs * 2 ** (failures - 1));
      this.#options.log.warn({ queue: this.#options.name, key, failures, retryInMs: delay, err: apiErrorMessage(err) }, "reconcile failed; will retry");
      this.addAfter(key, delay);
    } finally {
      this.#running.delete(key);
      this.#active--;
      if (this.#dirty.delete(key)) this.add(key);
      if (this.#active === 0) for (const resolve of this.#idle.splice(0)) resolve();
      this.#pump();
    }
  }
}
