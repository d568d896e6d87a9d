// Watches a running destination's consumer and tells when it is gone: deleted under delivery
// (`nats consumer rm`, storage lost), the client's pulls stop without a word. What to do about it
// is the delivery service's to decide (DeliveryService recreates it, if the destination is still
// wanted), with the last acknowledged message seen here, so that nothing stored since is skipped.
import type { ConsumerMessages, JetStreamManager } from "@nats-io/jetstream";
import { EVENTS_STREAM, isConsumerNotFound } from "../nats/mod.ts";

/** How often the consumer is looked at (its ack floor noted, its presence checked). */
export const CONSUMER_CHECK_MS = 30_000;
/**
 * A missing consumer is reported only when still missing this much later: the operator deletes
 * the consumer of a destination it disables or removes just after it changes the config, which
 * stops this watch first (or makes the service see the destination is no longer wanted).
 */
const CONFIRM_AFTER_MS = 5_000;

/** Where a consumer had got to: its ack floor, in the stream created at `streamCreated`, as seen at `seenAt` (ms, NATS's clock). */
export interface ConsumerPosition {
  ackFloor: number;
  streamCreated: string;
  seenAt: number;
}

export class ConsumerWatch {
  readonly #jsm: JetStreamManager;
  readonly #name: string;
  readonly #lost: (last: ConsumerPosition | undefined) => void;
  readonly #timer: NodeJS.Timeout;
  #last: ConsumerPosition | undefined;
  #checking: Promise<void> | undefined;
  #stopped = false;

  /** @param lost hears (once) that the consumer is gone, with where it had got to if known. */
  constructor(jsm: JetStreamManager, name: string, lost: (last: ConsumerPosition | undefined) => void, checkEveryMs = CONSUMER_CHECK_MS) {
    this.#jsm = jsm;
    this.#name = name;
    this.#lost = lost;
    this.#timer = setInterval(() => void this.check(), checkEveryMs);
    this.#timer.unref();
    void this.check();
  }

  /** Where the consumer had got to when last seen, if it was. */
  get last(): ConsumerPosition | undefined {
    return this.#last;
  }

  /** Also checks at once when the client reports the consumer gone. */
  follow(messages: ConsumerMessages): void {
    void (async () => {
      for await (const status of messages.status()) {
        if (status.type === "consumer_deleted" || status.type === "consumer_not_found") void this.check();
      }
    })().catch(() => {});
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
  }

  check(): Promise<void> {
    this.#checking ??= this.#check().finally(() => (this.#checking = undefined));
    return this.#checking;
  }

  async #check(): Promise<void> {
    if (this.#stopped || (await this.#present())) return;
    await new Promise((r) => setTimeout(r, CONFIRM_AFTER_MS).unref());
    if (this.#stopped || (await this.#present())) return;
    this.stop();
    this.#lost(this.#last);
  }

  /** Whether the consumer exists (noting where it had got to); true when NATS cannot tell. */
  async #present(): Promise<boolean> {
    try {
      // The stream's creation time tells a floor of this stream from one of a stream since
      // recreated. Read at every look, and before the consumer: the operator remakes a lost
      // stream's consumers within a second, before this watch sees them gone, and a time read
      // once paired the new stream's floor with the old stream, so a later loss of the consumer
      // sent the whole stream again (found by a disaster-recovery review: 179 of 179 re-sent).
      // Read in this order, a stream made again between the two reads pairs a new floor with the
      // old time: the whole stream again (duplicates), never a skip.
      const { created } = await this.#jsm.streams.info(EVENTS_STREAM);
      const info = await this.#jsm.consumers.info(EVENTS_STREAM, this.#name);
      // nats-server's clock where it says (2.10+): compared with its messages' times.
      const seenAt = info.ts ? Date.parse(info.ts) : Date.now();
      this.#last = { ackFloor: info.ack_floor.stream_seq, streamCreated: created, seenAt };
      return true;
    } catch (err) {
      return !isConsumerNotFound(err);
    }
  }
}
