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

/**
 * JSON.parse, made safe from a V8 bug, with numbers a double cannot hold kept as written unless
 * `exactNumbers` is false (a reader that needs only a message's type and ids).
 *
 * The V8 bug (nodejs/node#63785, open in every Node release to date): once JSON.parse has read
 * an object with a key holding a backslash (`{"t":1,"\\":1}`), a later object with the same
 * keys before it reads an escaped key (`"\n"`, `"\u00e9"`) as that key instead. A request of one
 * tenant could so rename fields in another's messages, silently. A key read wrongly always holds
 * a backslash (V8 took a cached key whose characters matched the escape's), and an escaped key
 * needs a backslash in the text: so a text with none is read by JSON.parse alone, and a result
 * with such a key is read again by readJson(), which builds its objects without V8's cache.
 */
export function parseJson(text: string, { exactNumbers = true }: { exactNumbers?: boolean } = {}): unknown {
  let value: unknown;
  if (exactNumbers && MAY_LOSE_DIGITS.test(text)) {
    try {
      value = JSON.parse(text, keepInexactNumbers);
    } catch (err) {
      // A reviver recurses: deep nesting overflows the stack where JSON.parse alone does not,
      // and valid JSON must not become a 400 (the routes judge each message's depth).
      if (!(err instanceof RangeError)) throw err;
      return readJson(text, exactNumbers);
    }
  } else {
    value = JSON.parse(text);
  }
  return text.includes("\\") && hasKeyWithBackslash(value) ? readJson(text, exactNumbers) : value;
}

function keepInexactNumbers(_key: string, value: unknown, context?: { source?: string }): unknown {
  if (typeof value !== "number" || context?.source === undefined) return value;
  return exactNumber(value, context.source);
}

/** The number, or its text kept as written when the double differs from it. */
function exactNumber(value: number, source: string): unknown {
  const inexact =
    !Number.isFinite(value) || // overflowed: 1e400
    (value === 0 ? /[1-9]/.test(source.split(/[eE]/)[0]!) : source.length >= 16 && String(value) !== source); // underflowed, or rounded
  return inexact ? rawJSON(source) : value;
}

/** Whether any object in `value` has a key with a backslash. Iterative: it may be deeper than the stack. */
function hasKeyWithBackslash(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const next = stack.pop();
    if (next === null || typeof next !== "object" || isRawJSON(next)) continue;
    if (Array.isArray(next)) {
      for (const item of next) if (item !== null && typeof item === "object") stack.push(item);
      continue;
    }
    for (const key in next) {
      if (key.includes("\\")) return true;
      const item = (next as Record<string, unknown>)[key];
      if (item !== null && typeof item === "object") stack.push(item);
    }
  }
  return false;
}

const WHITESPACE = /[ \t\n\r]*/y;
// eslint-disable-next-line no-control-regex -- JSON forbids raw control characters in strings
const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/**
 * A JSON reader of its own, for the texts JSON.parse may get wrong (see parseJson). Strings and
 * keys are decoded by JSON.parse one at a time, which no cache can confuse; objects are built by
 * assignment (`__proto__` as an own property, as JSON.parse makes it). Iterative, so nesting
 * deeper than the stack is read; invalid JSON throws a SyntaxError.
 */
export function readJson(text: string, exactNumbers = true): unknown {
  let at = 0;
  const fail = (): never => {
    throw new SyntaxError(`Unexpected ${at < text.length ? `token ${JSON.stringify(text[at])}` : "end of JSON input"} at position ${at}`);
  };
  const skip = () => {
    WHITESPACE.lastIndex = at;
    WHITESPACE.test(text);
    at = WHITESPACE.lastIndex;
  };
  const string = (): string => {
    STRING.lastIndex = at;
    const match = STRING.exec(text) ?? fail();
    at = STRING.lastIndex;
    const token = match[0];
    return token.includes("\\") ? (JSON.parse(token) as string) : token.slice(1, -1);
  };
  type Open = { container: unknown[] } | { container: Record<string, unknown>; key: string };
  const stack: Open[] = [];
  for (;;) {
    // A value.
    skip();
    let value: unknown;
    const c = text[at];
    if (c === "{" || c === "[") {
      at++;
      skip();
      if (c === "[") {
        if (text[at] === "]") {
          at++;
          value = [];
        } else {
          stack.push({ container: [] });
          continue;
        }
      } else if (text[at] === "}") {
        at++;
        value = {};
      } else {
        if (text[at] !== '"') fail();
        const key = string();
        skip();
        if (text[at] !== ":") fail();
        at++;
        stack.push({ container: {}, key });
        continue;
      }
    } else if (c === '"') {
      value = string();
    } else if (text.startsWith("true", at)) {
      at += 4;
      value = true;
    } else if (text.startsWith("false", at)) {
      at += 5;
      value = false;
    } else if (text.startsWith("null", at)) {
      at += 4;
      value = null;
    } else {
      NUMBER.lastIndex = at;
      const match = NUMBER.exec(text) ?? fail();
      at = NUMBER.lastIndex;
      const number = Number(match[0]);
      value = exactNumbers ? exactNumber(number, match[0]) : number;
    }
    // Where it goes, and the containers it closes.
    for (;;) {
      const open = stack.at(-1);
      if (!open) {
        skip();
        if (at !== text.length) fail();
        return value;
      }
      if ("key" in open) {
        if (open.key === "__proto__") Object.defineProperty(open.container, "__proto__", { value, writable: true, enumerable: true, configurable: true });
        else open.container[open.key] = value;
      } else {
        open.container.push(value);
      }
      skip();
      const next = text[at];
      if (next === ",") {
        at++;
        if ("key" in open) {
          skip();
          if (text[at] !== '"') fail();
          open.key = string();
          skip();
          if (text[at] !== ":") fail();
        at++;
        }
        break;
      }
      if (next !== ("key" in open ? "}" : "]")) fail();
      at++;
      stack.pop();
      value = open.container;
    }
  }
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
