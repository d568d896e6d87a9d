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
 * Text that may hold a number a double cannot hold: a JSON value (after `:`, `,` or `[`) of 16 or
 * more digits and points, or with a three-digit exponent. Most messages have none, and are parsed
 * without a reviver, which costs several times the parse. (Without the value context, hex ids
 * such as "4e123f..." matched: every browser message took the slow path.)
 */
const MAY_LOSE_DIGITS = /[:,[]\s*-?\d(?:[\d.]{15}|[\d.]*[eE][+-]?\d{3})/;

/** Whether parseJson reads `text` with the reviver that keeps such numbers (exported for its tests). */
export function mayHoldInexactNumbers(text: string): boolean {
  return MAY_LOSE_DIGITS.test(text);
}

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

/**
 * Fields that hold a map. PHP's json_encode writes an empty map as `[]` (analytics-php passes
 * `integrations` through as the app built it, and Segment's own delete notifications carry
 * `"context":[],"integrations":[]`), so there an empty array is an empty map.
 */
const MAP_FIELDS = new Set(["context", "integrations", "properties", "traits"]);

/**
 * A message's (or batch body's) top-level field as a validator may check it: a number kept as
 * written is an object to a validator, and must not pass where an object is wanted
 * (`"context": 1e400`), so it becomes a plain (rounded) number; `integrations`' values are
 * checked too; `[]` in a map field is `{}`. Everything else stays as it is.
 */
export function checkableField(name: string, value: unknown): unknown {
  if (typeof value !== "object") return value;
  if (Array.isArray(value)) return value.length === 0 && MAP_FIELDS.has(name) ? {} : value;
  return name === "integrations" ? plainNumberValues(value) : isRawJSON(value) ? Number(value.rawJSON) : value;
}

function plainNumberValues(value: unknown): unknown {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  let copy: Record<string, unknown> | undefined;
  for (const key in value) {
    const inner = (value as Record<string, unknown>)[key];
    if (isRawJSON(inner)) (copy ??= { ...(value as Record<string, unknown>) })[key] = Number(inner.rawJSON);
  }
  return copy ?? value;
}
