// Follows the config bucket for entries the operator did not write: a `nats kv del` or `nats kv
// put` by hand, a script, another process. Each is told at once, so the entry's resource is
// reconciled and the entry written again. Before, such an entry stayed wrong until the next
// resync (10 minutes): ingest answered 401 to a valid write key, and its Source still said Ready
// (found by a disaster-recovery review).
import { KvWatchInclude, type KV, type KvEntry } from "@nats-io/kv";
import type { ConfigWriter } from "../dataplane/config/mod.ts";
import type { Logger } from "../dataplane/logging.ts";

/** How long after a failed or ended watch the bucket is watched again. */
const WATCH_AGAIN_MS = 2_000;

export class ConfigDrift {
  readonly #kv: KV;
  readonly #writer: ConfigWriter;
  readonly #onDrift: (entry: KvEntry) => void;
  readonly #log: Logger;
  #watch: { stop(): void } | undefined;
  #stopped = false;

  /** @param onDrift hears of every entry written or deleted by anyone but `writer`. */
  constructor(kv: KV, writer: ConfigWriter, onDrift: (entry: KvEntry) => void, log: Logger) {
    this.#kv = kv;
    this.#writer = writer;
    this.#onDrift = onDrift;
    this.#log = log;
    void this.#run();
  }

  async #run(): Promise<void> {
    let failures = 0;
    while (!this.#stopped) {
      try {
        // Updates only: what the bucket holds at start is the resync's to check.
        const watch = await this.#kv.watch({ key: ">", include: KvWatchInclude.UpdatesOnly });
        this.#watch = watch;
        failures = 0;
        for await (const entry of watch) if (!this.#writer.wroteLast(entry)) this.#onDrift(entry);
      } catch (err) {
        // Said once per run of failures: the bucket's guard says why it is missing.
        if (failures++ === 0 && !this.#stopped) this.#log.warn({ err: (err as Error).message }, "watching the config bucket for changes made by others failed; retrying");
      }
      if (!this.#stopped) await new Promise((r) => setTimeout(r, WATCH_AGAIN_MS).unref());
    }
  }

  /**
   * Watches again, from now: the bucket was made again, or restored from a backup, and a watch
   * follows its sequence numbers, which restarted or went back.
   */
  restart(): void {
    this.#watch?.stop();
  }

  stop(): void {
    this.#stopped = true;
    this.#watch?.stop();
  }
}
