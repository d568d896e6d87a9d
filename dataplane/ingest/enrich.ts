// Fields the Tracking API adds or normalises on every accepted message (segment.md §1.7-1.9).
import { randomUUID } from "node:crypto";
import type { MessageType, StoredMessage } from "../../schema/mod.ts";
import { isoTimestamp } from "../iso-time.ts";

export interface BatchDefaults {
  context?: Record<string, unknown>;
  integrations?: Record<string, unknown>;
  sentAt?: unknown;
}

export interface EnrichContext {
  receivedAt: Date;
  /** The caller's address (after trusted proxies); asked for only when context.direct is true. */
  ip: () => string;
  batch?: BatchDefaults;
}

const MAX_DATE_MS = 8.64e15;
const UNKNOWN_LIBRARY = Object.freeze({ name: "unknown", version: "unknown" });
const ID_FIELDS = ["userId", "anonymousId", "groupId", "previousId"] as const;

function parseDate(value: unknown): number | undefined {
  if (typeof value !== "string" || value.length === 0) return undefined;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? undefined : ms;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

/**
 * Adds and normalises the Tracking API's fields. Takes ownership of `message` (judge() hands over
 * a fresh copy of what was sent) and returns it: copying it again cost more than the rest.
 */
export function enrich(message: Record<string, unknown>, type: MessageType, ctx: EnrichContext): StoredMessage {
  const receivedAt = ctx.receivedAt.getTime();
  const batch = ctx.batch;

  // Batch-level context and integrations apply to every item; the item's own keys win.
  const batchContext = isObject(batch?.context) ? batch.context : undefined;
  const ownContext = isObject(message.context) ? message.context : undefined;
  // Without a batch context the item's own object is used as it is: it too belongs to this request.
  const context: Record<string, unknown> = batchContext ? { ...batchContext, ...ownContext } : (ownContext ?? {});
  const integrations = isObject(batch?.integrations) || isObject(message.integrations)
    ? { ...(isObject(batch?.integrations) ? batch.integrations : {}), ...(isObject(message.integrations) ? message.integrations : {}) }
    : undefined;
  if (!isObject(context.library) || typeof context.library.name !== "string") context.library = { ...UNKNOWN_LIBRARY };
  if (context.direct === true && typeof context.ip !== "string") context.ip = ctx.ip();

  // Clock-skew correction as Segment does it: timestamp = receivedAt - (sentAt - originalTimestamp).
  const sentAtValue = message.sentAt ?? batch?.sentAt;
  const originalValue = message.originalTimestamp ?? message.timestamp;
  const sentAt = parseDate(sentAtValue);
  const original = parseDate(originalValue);
  let timestamp: number;
  if (original === undefined) timestamp = receivedAt;
  else if (sentAt === undefined) timestamp = original;
  else timestamp = receivedAt - (sentAt - original);
  // Absurd inputs (year 275760 minus year 2000) can leave the range of a Date.
  if (!(Math.abs(timestamp) <= MAX_DATE_MS)) timestamp = receivedAt;

  message.type = type;
  delete message.writeKey; // a credential: never stored, never forwarded
  for (const field of ID_FIELDS) {
    if (typeof message[field] === "number") message[field] = String(message[field]);
  }
  if (typeof message.messageId !== "string") message.messageId = `th-${randomUUID()}`;
  message.context = context;
  if (integrations) message.integrations = integrations;
  // All four in one form, UTC with milliseconds, as Segment presents them: SDKs send local
  // offsets (Go: "+05:30") and micro- or nanoseconds (Python, Go), and a receiver should not have
  // to parse each SDK's style. A string that is not a date is kept as sent; anything else is dropped.
  message.receivedAt = isoTimestamp(receivedAt);
  if (sentAt !== undefined && Math.abs(sentAt) <= MAX_DATE_MS) message.sentAt = isoTimestamp(sentAt);
  else if (typeof sentAtValue === "string") message.sentAt = sentAtValue;
  else delete message.sentAt; // not text: receivers expect a string or nothing
  message.originalTimestamp = original !== undefined && Math.abs(original) <= MAX_DATE_MS ? isoTimestamp(original) : message.receivedAt;
  message.timestamp = isoTimestamp(timestamp);
  return message as StoredMessage;
}
