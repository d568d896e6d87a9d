// JSON.parse that keeps the numbers a double cannot hold exactly as they were written. A message
// is stored and delivered as JSON, and a 64-bit id in `properties` (an order or a snowflake id
// sent by the Go, Java or Python SDK) must reach the webhook as sent, not rounded
// (12345678901234567890 became 12345678901234567000, 1e400 became null). Such numbers are kept as
// JSON.rawJSON values, which JSON.stringify writes out as their source text.

interface RawJson {
  readonly rawJSON: string;
}
// Node 22+ (V8's JSON.parse source text access); not yet in TypeScript's lib.
const { rawJSON, isRawJSON } = JSON as unknown as { rawJSON(text: string): RawJson; isRawJSON(value: unknown): value is RawJson };
export { isRawJSON };

/**
 * Text that may hold a number a double cannot hold: 16 or more digits (and points) in a row, or a
 * three-digit exponent. Most messages have neither, and are parsed without a reviver, which would
 * cost several times the parse.
 */
const MAY_LOSE_DIGITS = /\d[\d.]{15}|[eE][+-]?\d{3}/;

export function parseJson(text: string): unknown {
  return MAY_LOSE_DIGITS.test(text) ? JSON.parse(text, keepInexactNumbers) : JSON.parse(text);
}

function keepInexactNumbers(_key: string, value: unknown, context?: { source?: string }): unknown {
  if (typeof value !== "number" || context?.source === undefined) return value;
  const source = context.source;
  const inexact =
    !Number.isFinite(value) || // overflowed: 1e400
    (value === 0 ? /[1-9]/.test(source.split(/[eE]/)[0]!) : source.length >= 16 && String(value) !== source); // underflowed, or rounded
  return inexact ? rawJSON(source) : value;
}

/** A number kept as written, as text (for ids, which are stored as strings); other values as they are. */
export function rawNumberText(value: unknown): unknown {
  return isRawJSON(value) ? value.rawJSON : value;
}
