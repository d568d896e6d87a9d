// One durable pull consumer per WebhookDestination on TRACKHOOK_EVENTS, filtering the subjects
// of its sources plus its own replay subject. `deliver`/`dev` manage them from config today and
// the operator will call the same functions.
import { AckPolicy, DeliverPolicy, type ConsumerConfig, type JetStreamManager } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import type { CompiledDestination } from "../../schema/mod.ts";
import { EVENTS_STREAM, consumerName, isConsumerNotFound, replaySubject, sourceSubjects } from "../nats/mod.ts";

/**
 * ack_wait must outlast the worst delivery round (all URLs in parallel, each bounded by the
 * timeout) plus recording attempts or a dead letter, so a message in flight is never redelivered
 * while it is still being sent.
 */
export function ackWaitMs(destination: CompiledDestination): number {
  return destination.timeoutMs + 30_000;
}

export function destinationConsumerConfig(destination: CompiledDestination): Partial<ConsumerConfig> & { durable_name: string } {
  const { namespace, name } = destination;
  return {
    durable_name: consumerName(namespace, name),
    filter_subjects: [...destination.sources.map((source) => sourceSubjects(namespace, source)), replaySubject(namespace, name)],
    ack_policy: AckPolicy.Explicit,
    // A new destination receives what arrives from now on, not the stream's whole history.
    deliver_policy: DeliverPolicy.New,
    ack_wait: nanos(ackWaitMs(destination)),
    // The destination's concurrency: messages waiting for a retry count too, so a dead endpoint
    // fills its own window and stalls only itself.
    max_ack_pending: destination.maxInFlight,
    max_deliver: -1,
  };
}

/** Creates the destination's consumer, or updates its filters and limits in place. */
export async function ensureDestinationConsumer(jsm: JetStreamManager, destination: CompiledDestination): Promise<string> {
  const config = destinationConsumerConfig(destination);
  const existing = await jsm.consumers.info(EVENTS_STREAM, config.durable_name).catch((err: Error) => {
    if (isConsumerNotFound(err)) return undefined;
    throw err;
  });
  if (!existing) {
    await jsm.consumers.add(EVENTS_STREAM, config);
  } else {
    const { deliver_policy: _fixed, ...mutable } = config;
    const differs = (Object.keys(mutable) as Array<keyof typeof mutable>).some(
      (key) => JSON.stringify(existing.config[key]) !== JSON.stringify(mutable[key]),
    );
    if (differs) await jsm.consumers.update(EVENTS_STREAM, config.durable_name, mutable);
  }
  return config.durable_name;
}

/** Deletes the named destination consumers; one already gone counts as deleted. */
export async function removeDestinationConsumers(jsm: JetStreamManager, names: Iterable<string>): Promise<void> {
  for (const name of names) {
    await jsm.consumers.delete(EVENTS_STREAM, name).catch((err: Error) => {
      if (!isConsumerNotFound(err)) throw err;
    });
  }
}
