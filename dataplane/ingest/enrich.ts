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
  ip: () => string | undefined;
  batch?: BatchDefaults;
}

/** The years an RFC 3339 timestamp can write: 0000-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z. */
const RFC3339_MIN_MS = Date.parse("0000-01-01T00:00:00.000Z");
const RFC3339_MAX_MS = Date.parse("9999-12-31T23:59:59.999Z");
const UNKNOWN_LIBRARY = Object.freeze({ name: "unknown", version: "unknown" });

/**
 * ISO-8601 as SDKs write it: a date, then optionally a time (a fraction of any length: Go sends
 * nanoseconds) and an offset. Date.parse alone is too lenient ("1" is 2001-01-01) and reads a time
 * without an offset in the server's zone.
 */
const ISO_8601 = /^(\d{4})-(\d\d)-(\d\d)(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(Z|[+-]\d\d(?::?\d\d)?)?)?$/i;

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function parseDate(value: unknown): number | undefined {
  if (typeof value !== "string") return undefined;
  const iso = ISO_8601.exec(value);
  if (!iso) return undefined;
  // Date.parse rolls a day past the month's end over ("2026-02-30" is March 2nd).
  const day = Number(iso[3]);
  if (day > 28) {
    const year = Number(iso[1]), month = Number(iso[2]);
    const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
    if (day > (month === 2 && leap ? 29 : (DAYS_IN_MONTH[month - 1] ?? 31))) return undefined;
  }
  let text = value.includes(",") ? value.replace(",", ".") : value;
  // A time without an offset is taken as UTC, wherever the ingest runs; "+05" as "+05:00".
  const offset = iso[4];
  if (offset === undefined && value.length > 10) text += "Z";
  else if (offset !== undefined && offset.length === 3) text += ":00";
  const ms = Date.parse(text);
  // A year-0000 or year-9999 time whose offset takes it out of the years RFC 3339 can write in UTC is no date either.
  return ms >= RFC3339_MIN_MS && ms <= RFC3339_MAX_MS ? ms : undefined;
}

/**
 * Whether a date's time has no offset ("2026-11-23T09:59:13.440"). Beside a time with one, its
 * difference is no clock skew but the device's UTC offset too: analytics_flutter's sentAt was
 * `DateTime.now().toIso8601String()`, local time, beside UTC event timestamps, which placed every
 * event hours off. Two such times (or two with offsets) are read on the same clock.
 */
const floating = (date: string): boolean => date.length > 10 && !/(?:z|[+-]\d\d(?::?\d\d)?)$/i.test(date);

/** Libraries that only run on the user's device: browsers and mobile apps. */
const DEVICE_LIBRARIES = new Set([
  "analytics.js", "analytics-ios", "analytics-swift", "analytics-android",
  "analytics-react-native", "@segment/analytics-react-native", "analytics-flutter",
]);

/**
 * Whether a message came straight from the user's device, whose address Segment then records as
 * context.ip ("for client side events only", research/segment.md §1.9): analytics.js and the
 * mobile SDKs never set context.direct. analytics-kotlin also runs on servers; on Android it
 * describes the device.
 */
function sentFromDevice(context: Record<string, unknown>): boolean {
  const name = (context.library as { name: string }).name;
  return DEVICE_LIBRARIES.has(name) || (name === "analytics-kotlin" && isObject(context.device));
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

/**
 * The first of two values that is a date, with its time; else the first that is there at all
 * (kept as sent), without a time. Each is read once: this runs for every message.
 */
function firstDate(preferred: unknown, fallback: unknown): [unknown, number | undefined] {
  const first = parseDate(preferred);
  if (first !== undefined) return [preferred, first];
  const second = parseDate(fallback);
  return second !== undefined ? [fallback, second] : [preferred ?? fallback, undefined];
}

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
  // A library object without a name keeps what it has (found by a review: its version was lost).
  const library = context.library;
  if (!isObject(library)) context.library = { ...UNKNOWN_LIBRARY };
  else if (typeof library.name !== "string") context.library = { ...library, name: UNKNOWN_LIBRARY.name, ...(library.version === undefined ? { version: UNKNOWN_LIBRARY.version } : {}) };
  if (typeof context.ip !== "string" && (context.direct === true || sentFromDevice(context))) {
    const ip = ctx.ip();
    if (ip !== undefined) context.ip = ip;
  }

  // Clock-skew correction as Segment does it: timestamp = receivedAt - (sentAt - originalTimestamp).
  // The item's own sentAt, else the batch's; and originalTimestamp, else timestamp: one that is
  // not a date gives way to the other (found by a review: an unreadable originalTimestamp hid a
  // good timestamp, and an unreadable item sentAt the batch's).
  const [sentAtValue, sentAt] = firstDate(message.sentAt, batch?.sentAt);
  const [originalValue, original] = firstDate(message.originalTimestamp, message.timestamp);
  let timestamp: number;
  if (original === undefined) timestamp = receivedAt;
  else if (sentAt === undefined || floating(sentAtValue as string) !== floating(originalValue as string)) timestamp = original;
  else timestamp = receivedAt - (sentAt - original);
  // A correction by an absurd sentAt (year 9999, or 0001) can leave the years RFC 3339 writes
  // (the result, "-005947-10-16T…", is refused by Go's and most SQL parsers): then the time as sent.
  if (!(timestamp >= RFC3339_MIN_MS && timestamp <= RFC3339_MAX_MS)) timestamp = original ?? receivedAt;

  message.type = type;
  delete message.writeKey; // a credential: never stored, never forwarded
  if (typeof message.messageId !== "string") message.messageId = `th-${randomUUID()}`;
  message.context = context;
  if (integrations) message.integrations = integrations;
  // All four in one form, UTC with milliseconds, as Segment presents them: SDKs send local
  // offsets (Go: "+05:30") and micro- or nanoseconds (Python, Go), and a receiver should not have
  // to parse each SDK's style. A sentAt that is not an ISO-8601 date is kept as sent if it is a
  // string, dropped otherwise.
  message.receivedAt = isoTimestamp(receivedAt);
  if (sentAt !== undefined) message.sentAt = isoTimestamp(sentAt);
  else if (typeof sentAtValue === "string") message.sentAt = sentAtValue;
  else delete message.sentAt; // not text: receivers expect a string or nothing
  message.originalTimestamp = original !== undefined ? isoTimestamp(original) : message.receivedAt;
  message.timestamp = isoTimestamp(timestamp);
  return message as StoredMessage;
}
