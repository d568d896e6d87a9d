// Makes a stream again when it goes missing while the process runs: deleted by hand, or lost with
// nats-server's store (a lost volume). Streams were made only at start, so a storage review found
// ingest answering 503 to everything until someone restarted it (its liveness probe never fires),
// and delivery failing every dead letter ("jetstream is not enabled") for as long.
import type { JetStreamManager, StreamConfig } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../logging.ts";
import { isNatsConnected } from "./connect.ts";
import { isStreamNameInUse, isStreamNotFound } from "./streams.ts";

/** How often the streams are looked at: a lost stream costs at most this much of 503s. */
const STREAM_GUARD_MS = 5_000;

type GuardedStream = Partial<StreamConfig> & { name: string };

export class StreamGuard {
  readonly #nc: NatsConnection;
  readonly #jsm: JetStreamManager;
  readonly #streams: readonly GuardedStream[];
  readonly #log: Logger;
  readonly #timer: NodeJS.Timeout;
  #checking: Promise<void> | undefined;

  /** @param streams the configs to make them with, as ensureStream made them at start. */
  constructor(nc: NatsConnection, jsm: JetStreamManager, streams: readonly GuardedStream[], log: Logger, everyMs = STREAM_GUARD_MS) {
    this.#nc = nc;
    this.#jsm = jsm;
    this.#streams = streams;
    this.#log = log;
    this.#timer = setInterval(() => void this.check(), everyMs);
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

  async #check(): Promise<void> {
    if (!isNatsConnected(this.#nc)) return;
    for (const config of this.#streams) {
      try {
        await this.#jsm.streams.info(config.name);
      } catch (err) {
        if (!isStreamNotFound(err)) continue; // NATS busy or electing: not a reason to make anything
        try {
          // Made as a new stream: there is no existing one whose settings to keep.
          await this.#jsm.streams.add(config);
          this.#log.error(
            { stream: config.name },
            "the stream was missing (deleted, or nats-server lost its store) and is made again; what it held is gone: messages stored in it and not yet delivered are lost",
          );
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
