// After a deletion request, a message of the users still being retried can become a dead letter
// later; `replay` would send it again after the erasure. Both the operator (status.finalPurgeAt)
// and `delete-user` (the time it prints) look again once every such retry is over.
import type { JetStreamManager } from "@nats-io/jetstream";
import { retryWindowInForceMs } from "../delivery/mod.ts";
import { EVENTS_STREAM } from "../nats/mod.ts";

/**
 * The longest a message stored now can go on being retried before it is dead-lettered: 90% of
 * the events stream's max_age, whatever the destinations' retry windows (a message first pulled
 * after its window, behind a backlog, is still sent once), and 72h for a stream without one.
 */
export async function longestRetryMs(jsm: JetStreamManager): Promise<number> {
  const maxAgeNs = (await jsm.streams.info(EVENTS_STREAM)).config.max_age;
  return retryWindowInForceMs(Infinity, maxAgeNs > 0 ? maxAgeNs / 1e6 : 72 * 3_600_000);
}
