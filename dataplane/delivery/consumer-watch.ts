// Watches a running destination's consumer, and recreates it when it was deleted under delivery
// (`nats consumer rm`, storage lost): without it, pulling stops without a word, and a consumer
// made later from scratch would skip everything stored meanwhile. Recreated, it starts after the
// last acknowledged message seen, so what was stored since is delivered; messages acknowledged
// after that sighting may arrive twice, with the same delivery id.
import type { ConsumerMessages, JetStreamManager } from "@nats-io/jetstream";
import type { CompiledDestination } from "../../schema/mod.ts";
import type { Logger } from "../logging.ts";
import { EVENTS_STREAM, consumerName, isConsumerNotFound } from "../nats/mod.ts";
import { ensureDestinationConsumer } from "./consumers.ts";

/** How often the consumer is looked at (its ack floor noted, its presence checked). */
export const CONSUMER_CHECK_MS = 30_000;
/**
 * A deleted consumer is recreated only this long after it is missed, and only if the destination
 * is still running then: the operator deletes the consumer of a destination it removes just after
 * it takes the destination out of the config, which stops this watch first.
 */
const RECREATE_AFTER_MS = 2_000;

export class ConsumerWatch {
  readonly #jsm: JetStreamManager;
  readonly #destination: CompiledDestination;
  readonly #log: Logger;
  readonly #name: string;
  readonly #timer: NodeJS.Timeout;
  #ackFloor: number | undefined;
  #checking: Promise<void> | undefined;
  #stopped = false;
  readonly #recreated: () => Promise<void>;

  /** @param recreated pulls anew (the client's pulls of the deleted consumer do not resume on their own). */
  constructor(jsm: JetStreamManager, destination: CompiledDestination, log: Logger, recreated: () => Promise<void>, checkEveryMs = CONSUMER_CHECK_MS) {
    this.#recreated = recreated;
    this.#jsm = jsm;
    this.#destination = destination;
    this.#log = log;
    this.#name = consumerName(destination.namespace, destination.name);
    this.#timer = setInterval(() => void this.check(), checkEveryMs);
    this.#timer.unref();
    void this.check();
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
    if (this.#stopped) return;
    if (await this.#present()) return;
    await new Promise((r) => setTimeout(r, RECREATE_AFTER_MS));
    if (this.#stopped || (await this.#present())) return;
    const startSeq = this.#ackFloor === undefined ? undefined : this.#ackFloor + 1;
    this.#log.error(
      { consumer: this.#name, startSeq },
      "the destination's consumer was deleted under delivery; recreating it after the last acknowledged message seen (messages after it may arrive twice, with the same delivery id)",
    );
    try {
      await ensureDestinationConsumer(this.#jsm, this.#destination, startSeq === undefined ? {} : { startSeq });
      if (!this.#stopped) await this.#recreated();
    } catch (err) {
      this.#log.error({ consumer: this.#name, err: (err as Error).message }, "the destination's consumer could not be recreated; tried again shortly");
    }
  }

  /** Whether the consumer exists (noting its ack floor); true when NATS cannot tell. */
  async #present(): Promise<boolean> {
    try {
      const info = await this.#jsm.consumers.info(EVENTS_STREAM, this.#name);
      this.#ackFloor = info.ack_floor.stream_seq;
      return true;
    } catch (err) {
      return !isConsumerNotFound(err);
    }
  }
}
