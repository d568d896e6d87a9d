// Stores accepted messages in TRACKHOOK_EVENTS. A request is answered 200 only after every one of
// its messages has a PubAck; anything else is a 503 so the SDK retries (safe: Nats-Msg-Id dedup).
import type { JetStreamClient } from "@nats-io/jetstream";
import type { CompiledSource, StoredMessage } from "../../schema/mod.ts";
import { EVENTS_STREAM, eventMsgId, eventSubject } from "../nats/mod.ts";
import { errors, type IngestError } from "./errors.ts";
import type { IngestMetrics } from "./metrics.ts";

export type PublishOutcome = "stored" | "duplicate";

export interface PublisherOptions {
  timeoutMs: number;
  retryAfterSeconds: number;
}

export class EventPublisher {
  readonly #js: JetStreamClient;
  readonly #options: PublisherOptions;
  readonly #metrics: IngestMetrics;

  constructor(js: JetStreamClient, options: PublisherOptions, metrics: IngestMetrics) {
    this.#js = js;
    this.#options = options;
    this.#metrics = metrics;
  }

  /** Publishes all messages at once (pipelined); rejects with a 503 IngestError if any is not stored. */
  async publish(source: CompiledSource, messages: StoredMessage[]): Promise<PublishOutcome[]> {
    const results = await Promise.allSettled(messages.map((message) => this.#publishOne(source, message)));
    const failure = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failure) throw this.#classify(failure.reason);
    return results.map((r) => (r as PromiseFulfilledResult<PublishOutcome>).value);
  }

  async #publishOne(source: CompiledSource, message: StoredMessage): Promise<PublishOutcome> {
    const started = performance.now();
    const ack = await this.#js.publish(eventSubject(source.namespace, source.name, message.type), JSON.stringify(message), {
      msgID: eventMsgId(source.namespace, source.name, message.messageId),
      expect: { streamName: EVENTS_STREAM },
      timeout: this.#options.timeoutMs,
    });
    this.#metrics.publishDuration.observe((performance.now() - started) / 1000);
    return ack.duplicate ? "duplicate" : "stored";
  }

  #classify(err: unknown): IngestError {
    const text = err instanceof Error ? err.message : String(err);
    if (/maximum (bytes|messages)|insufficient resources|no space/i.test(text)) {
      return errors.storageFull(this.#options.retryAfterSeconds, err);
    }
    return errors.storageUnavailable(this.#options.retryAfterSeconds, err);
  }
}
