// Names on the NATS side of the data plane contract (DESIGN.md, "Data plane contract").
import type { StoredType } from "../../schema/mod.ts";

export const EVENTS_STREAM = "TRACKHOOK_EVENTS";
export const EVENTS_SUBJECTS = "trackhook.events.>";

/** `trackhook.events.<namespace>.<source>.<type>`; namespace and source are DNS labels. */
export function eventSubject(namespace: string, source: string, type: StoredType): string {
  return `trackhook.events.${namespace}.${source}.${type}`;
}

/** Nats-Msg-Id scoped to the source, so one tenant cannot suppress another's messages. */
export function eventMsgId(namespace: string, source: string, messageId: string): string {
  return `${namespace}/${source}/${messageId}`;
}
