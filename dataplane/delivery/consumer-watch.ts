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

/** Where a consumer had got to: its ack floor, in the stream created at `streamCreated`. */
export interface ConsumerPosition {
  ackFloor: number;
  streamCreated: string;
}

export class ConsumerWatch {
  readonly #jsm: JetStreamManager;
  readonly #name: string;
  readonly #lost: (last: ConsumerPosition | undefined) => void;
  readonly #timer: NodeJS.Timeout;
  #last: ConsumerPosition | undefined;
  /**
   * The events stream's creation time, read once: a stream recreated since takes its consumers
   * with it, which this watch then reports, and the service sees the stream's new time.
   */
  #streamCreated: string | undefined;
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
      const info = await this.#jsm.consumers.info(EVENTS_STREAM, this.#name);
      // The stream's creation time tells a floor of this stream from one of a stream since recreated.
      this.#streamCreated ??= (await this.#jsm.streams.info(EVENTS_STREAM)).created;
      this.#last = { ackFloor: info.ack_floor.stream_seq, streamCreated: this.#streamCreated };
      return true;
    } catch (err) {
      return !isConsumerNotFound(err);
    }
  }
}
