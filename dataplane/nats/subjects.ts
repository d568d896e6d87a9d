// Names on the NATS side of the data plane contract (DESIGN.md, "Data plane contract").
import type { StoredType } from "../../schema/mod.ts";

export const EVENTS_STREAM = "TRACKHOOK_EVENTS";
export const EVENTS_SUBJECTS = "trackhook.events.>";
/** Replayed dead letters, one subject per destination, in the events stream so its consumer sees them. */
export const REPLAY_SUBJECTS = "trackhook.replay.>";
export const DLQ_STREAM = "TRACKHOOK_DLQ";
export const DLQ_SUBJECTS = "trackhook.dlq.>";
export const ATTEMPTS_STREAM = "TRACKHOOK_ATTEMPTS";
export const ATTEMPTS_SUBJECTS = "trackhook.attempts.>";

/**
 * Headers of a dead letter in TRACKHOOK_DLQ (and of a replayed one in the events stream), written
 * by delivery and read by the admin commands: what went wrong, and where the message came from.
 */
export const DEAD_LETTER_HEADERS = {
  reason: "Trackhook-Reason",
  /** Deliveries of the message to the worker, pauses included. */
  attempts: "Trackhook-Attempts",
  destination: "Trackhook-Destination",
  /** The subject the message was first stored on, kept through replays. */
  originalSubject: "Trackhook-Original-Subject",
  lastStatus: "Trackhook-Last-Status",
  lastError: "Trackhook-Last-Error",
  /** On a replayed message: its sequence in the DLQ. */
  replayOf: "Trackhook-Replay-Of",
} as const;

/** Every source's events in one namespace. */
export function namespaceSubjects(namespace: string): string {
  return `trackhook.events.${namespace}.>`;
}

/** `trackhook.events.<namespace>.<source>.<type>`; namespace and source are DNS labels. */
export function eventSubject(namespace: string, source: string, type: StoredType): string {
  return `trackhook.events.${namespace}.${source}.${type}`;
}

/** The source of an event subject (`trackhook.events.<namespace>.<source>.<type>`); undefined for other subjects. */
export function sourceOfEventSubject(subject: string): string | undefined {
  const parts = subject.split(".");
  return parts.length === 5 && parts[0] === "trackhook" && parts[1] === "events" ? parts[3] : undefined;
}

/** The subjects of a source's messages, for a destination's consumer filter. */
export function sourceSubjects(namespace: string, source: string): string {
  return `trackhook.events.${namespace}.${source}.>`;
}

export function replaySubject(namespace: string, destination: string): string {
  return `trackhook.replay.${namespace}.${destination}`;
}

export function dlqSubject(namespace: string, destination: string): string {
  return `trackhook.dlq.${namespace}.${destination}`;
}

/** The destination of a subject made by dlqSubject(); undefined for any other subject. */
export function parseDlqSubject(subject: string): { namespace: string; destination: string } | undefined {
  const [prefix, kind, namespace, destination, ...rest] = subject.split(".");
  return prefix === "trackhook" && kind === "dlq" && namespace && destination && rest.length === 0 ? { namespace, destination } : undefined;
}

export function attemptsSubject(namespace: string, destination: string): string {
  return `trackhook.attempts.${namespace}.${destination}`;
}

/** Every destination's attempt records (not the first-delivery marks beside them). */
export const ATTEMPT_RECORD_SUBJECTS = "trackhook.attempts.*.*";

/**
 * A `--config` destination's marks of the first delivery on a NATS, beside its attempt records:
 * `owed`, it was in the files then, so its consumer, once made, reads the events stream from its
 * first message; `made`, that consumer was made. (Delivery's NATS user may publish here and read
 * counts per subject; it may not delete messages.)
 */
export function firstDeliverySubject(namespace: string, destination: string, mark: "owed" | "made" | "*"): string {
  return `${attemptsSubject(namespace, destination)}.first-delivery.${mark}`;
}

/** The durable consumer of a destination. Names are DNS labels, so "_" separates unambiguously. */
export const CONSUMER_PREFIX = "dest_";
export function consumerName(namespace: string, destination: string): string {
  return `${CONSUMER_PREFIX}${namespace}_${destination}`;
}

/** The destination a consumer named by consumerName() belongs to; undefined for other consumers. */
export function parseConsumerName(name: string): { namespace: string; destination: string } | undefined {
  if (!name.startsWith(CONSUMER_PREFIX)) return undefined;
  const [namespace, destination, ...rest] = name.slice(CONSUMER_PREFIX.length).split("_");
  return namespace && destination && rest.length === 0 ? { namespace, destination } : undefined;
}

/** Nats-Msg-Id scoped to the source, so one tenant cannot suppress another's messages. */
export function eventMsgId(namespace: string, source: string, messageId: string): string {
  return `${namespace}/${source}/${PLAIN_ID.test(messageId) ? messageId : escapeId(messageId)}`;
}

/** Ids a header carries unchanged: printable ASCII but `%`, spaces inside only. */
const PLAIN_ID = /^[\x21-\x24\x26-\x7e](?:[\x20-\x24\x26-\x7e]*[\x21-\x24\x26-\x7e])?$/;

/**
 * Any other id, one to one: each UTF-16 unit outside that set as `%` and four hex digits (a plain
 * id has no `%`, so the two forms never meet). A header value loses trailing spaces and carries
 * UTF-8, where a lone surrogate becomes U+FFFD: "m1" and "m1 ", or "x\ud800" and "x\udfff", were
 * one id to deduplication, and the second message was dropped as a repeat (found by a fuzz review).
 */
function escapeId(id: string): string {
  let out = "";
  for (let i = 0; i < id.length; i++) {
    const unit = id.charCodeAt(i);
    out += unit > 0x20 && unit < 0x7f && unit !== 0x25 ? id[i] : `%${unit.toString(16).padStart(4, "0")}`;
  }
  return out;
}
