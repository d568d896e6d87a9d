// How a message of the events stream is stored as a dead letter: by the worker that gave up on
// it, and for a destination disabled or deleted before it delivered it (undelivered.ts).
import type { JsMsg } from "@nats-io/jetstream";
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";
import { DEAD_LETTER_HEADERS } from "../nats/mod.ts";
import type { DeadLetterReason } from "./metrics.ts";
import type { AttemptOutcome } from "./outcome.ts";

/** The headers and Nats-Msg-Id of `m`'s dead letter for `destination` (namespace/name). */
export function deadLetterOptions(m: JsMsg, destination: string, reason: DeadLetterReason, attempts: number, last?: AttemptOutcome): { headers: MsgHdrs; msgID: string } {
  const h = natsHeaders();
  h.set(DEAD_LETTER_HEADERS.reason, reason);
  h.set(DEAD_LETTER_HEADERS.attempts, String(attempts));
  h.set(DEAD_LETTER_HEADERS.destination, destination);
  // A replayed message keeps the subject it was first stored on (its source), not the replay subject.
  h.set(DEAD_LETTER_HEADERS.originalSubject, m.headers?.get(DEAD_LETTER_HEADERS.originalSubject) || m.subject);
  if (last?.status !== undefined) h.set(DEAD_LETTER_HEADERS.lastStatus, String(last.status));
  if (last && "error" in last && last.error) h.set(DEAD_LETTER_HEADERS.lastError, last.error);
  // Keyed by the stream sequence: a crash between the publish and the ack stores it once, yet a
  // replayed copy (a new sequence) can be dead-lettered again. And by when it was stored: a stream
  // made again numbers from 1 again, and another message's dead letter under the same sequence
  // within the window was dropped as a duplicate, the message acked and lost (found by a review).
  return { headers: h, msgID: `${destination}/${m.seq}/${m.info.timestampNanos}` };
}
