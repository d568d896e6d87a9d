// Makes a stream again when it goes missing while the process runs: deleted by hand, or lost with
// nats-server's store (a lost volume). Streams were made only at start, so a storage review found
// ingest answering 503 to everything until someone restarted it (its liveness probe never fires),
// and delivery failing every dead letter ("jetstream is not enabled") for as long.
import type { JetStreamManager, StreamConfig, StreamState } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Counter } from "prom-client";
import type { Logger } from "../logging.ts";
import { isNatsConnected } from "./connect.ts";
import { isStreamNameInUse, isStreamNotFound } from "./streams.ts";

/** How often the streams are looked at: a lost stream costs at most this much of 503s. */
const STREAM_GUARD_MS = 5_000;

/**
 * A stream to keep: its config as made at start, or how to make it (a KV bucket's stream is made
 * as the bucket), and who to tell once it was made again.
 */
type GuardedStream = (Partial<StreamConfig> & { name: string }) | {
  name: string;
  make: () => Promise<unknown>;
  onMade?: () => void;
  /** The error line when made again. */
  said: string;
  /**
   * Told when the stream's last sequence went back (restored from a backup: same stream, same
   * creation time, older content), with the line said then.
   */
  rolledBack?: { run: () => void; said: string };
};

/** Where a stream ended when last seen: its creation time, last sequence and that message's time. */
interface End {
  created: string;
  lastSeq: number;
  lastAt: string;
}

export class StreamGuard {
  readonly #nc: NatsConnection;
  readonly #jsm: JetStreamManager;
  readonly #streams: readonly GuardedStream[];
  readonly #log: Logger;
  readonly #timer: NodeJS.Timeout;
  /**
   * Each stream's config as last seen: it is made again with it, not with this process's flags
   * and their defaults (a pod started without --stream-replicas would make an R3 stream R1).
   */
  readonly #seen = new Map<string, StreamConfig>();
  /** Each stream's creation time and last sequence as last seen, to tell a restore from a backup. */
  readonly #ends = new Map<string, End>();
  #checking: Promise<void> | undefined;
  readonly #recreated: Counter<"stream"> | undefined;

  /**
   * @param streams the configs to make them with, as ensureStream made them at start.
   * @param options.recreated counts each stream this process made again (trackhook_stream_recreated_total),
   *   every guarded stream's series served from 0: an alert on increase() misses a series' first sample.
   */
  constructor(nc: NatsConnection, jsm: JetStreamManager, streams: readonly GuardedStream[], log: Logger, options: { everyMs?: number; recreated?: Counter<"stream"> } = {}) {
    this.#nc = nc;
    this.#jsm = jsm;
    this.#streams = streams;
    this.#log = log;
    this.#recreated = options.recreated;
    for (const { name } of streams) this.#recreated?.inc({ stream: name }, 0);
    this.#timer = setInterval(() => void this.check(), options.everyMs ?? STREAM_GUARD_MS);
    this.#timer.unref();
  }

  /** Looks now (the interval calls it). */
  check(): Promise<void> {
    this.#checking ??= this.#check().finally(() => (this.#checking = undefined));
    return this.#checking;
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /**
   * Whether a stream went back to older content since `before` (restored from a backup): it ends
   * below where it ended, or the message where it ended was written since (as many written again
   * after the restore; found by a diff review). One read, only when the stream has grown.
   */
  async #wentBack(stream: string, now: StreamState, before: End): Promise<boolean> {
    if (now.last_seq < before.lastSeq) return true;
    if (now.last_seq === before.lastSeq) return now.last_ts !== before.lastAt;
    if (before.lastSeq === 0) return false;
    const m = await this.#jsm.streams.getMessage(stream, { seq: before.lastSeq }).catch(() => null);
    return m !== null && m.time.getTime() !== Date.parse(before.lastAt);
  }

  async #check(): Promise<void> {
    if (!isNatsConnected(this.#nc)) return;
    for (const config of this.#streams) {
      try {
        const info = await this.#jsm.streams.info(config.name);
        this.#seen.set(config.name, info.config);
        const before = this.#ends.get(config.name);
        this.#ends.set(config.name, { created: info.created, lastSeq: info.state.last_seq, lastAt: info.state.last_ts });
        if ("make" in config && config.rolledBack && before?.created === info.created && (await this.#wentBack(config.name, info.state, before))) {
          this.#log.error({ stream: config.name, lastSeq: info.state.last_seq, lastSeqBefore: before.lastSeq }, config.rolledBack.said);
          config.rolledBack.run();
        }
      } catch (err) {
        if (!isStreamNotFound(err)) continue; // NATS busy or electing: not a reason to make anything
        try {
          const seen = this.#seen.get(config.name);
          if ("make" in config) await config.make();
          else await this.#jsm.streams.add(seen ?? config);
          this.#log.error(
            { stream: config.name },
            "make" in config ? config.said : "the stream was missing (deleted, or nats-server lost its store) and is made again; what it held is gone: messages stored in it and not yet delivered are lost",
          );
          this.#recreated?.inc({ stream: config.name });
          if ("make" in config) config.onMade?.();
        } catch (makeErr) {
          // Another replica made it first and said so: one error line per loss, not one per pod.
          if (isStreamNameInUse(makeErr)) {
            this.#log.info({ stream: config.name }, "the stream was missing and another process has made it again");
          } else {
            this.#log.error({ stream: config.name, err: (makeErr as Error).message }, "the stream is missing and could not be made again; retrying");
          }
        }
      }
    }
  }
}
