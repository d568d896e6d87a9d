// Date.prototype.toISOString for the hot paths. V8 formats it through a printf-style runtime call
// that costs ~0.6 µs; the ingest writes two per message (receivedAt, timestamp) and delivery one
// per attempt record. Here the date part ("2026-01-15T") is remembered per day and only the time
// of day is formatted, which is ~10x cheaper and gives the same string.

const DAY_MS = 86_400_000;
/** 10000-01-01T00:00:00.000Z: from here on toISOString writes a six-digit year with a sign. */
const YEAR_10000_MS = 253_402_300_800_000;
const MAX_DAYS_REMEMBERED = 1024;

const TWO_DIGITS = Array.from({ length: 60 }, (_, n) => String(n).padStart(2, "0"));
const THREE_DIGITS = Array.from({ length: 1000 }, (_, n) => String(n).padStart(3, "0"));

const dayPrefixes = new Map<number, string>();
let lastDay = NaN;
let lastPrefix = "";

function dayPrefix(day: number): string {
  if (day === lastDay) return lastPrefix;
  let prefix = dayPrefixes.get(day);
  if (prefix === undefined) {
    // Bounded: a batch of far-apart timestamps must not grow this without limit.
    if (dayPrefixes.size >= MAX_DAYS_REMEMBERED) dayPrefixes.clear();
    prefix = new Date(day * DAY_MS).toISOString().slice(0, 11);
    dayPrefixes.set(day, prefix);
  }
  lastDay = day;
  lastPrefix = prefix;
  return prefix;
}

// The last second formatted ("2026-01-15T10:00:00."), and the last result: the ingest formats
// receivedAt (the same second for every request in it) and an SDK's timestamp, which
// originalTimestamp and timestamp often share. Each string built by parts is a rope that
// JSON.stringify must flatten again, so reusing one saves both.
let lastSecond = NaN;
let lastSecondPrefix = "";
let lastMs = NaN;
let lastText = "";

/** `new Date(ms).toISOString()` for a valid time value (throws RangeError otherwise, as it does). */
export function isoTimestamp(ms: number): string {
  if (ms === lastMs) return lastText;
  // Before 1970, fractional or past year 9999: rare, so left to the built-in.
  if (!(ms >= 0 && ms < YEAR_10000_MS) || !Number.isInteger(ms)) return new Date(ms).toISOString();
  const millis = ms % 1000;
  const second = (ms - millis) / 1000;
  if (second !== lastSecond) {
    const day = Math.floor(ms / DAY_MS);
    let rest = second - day * (DAY_MS / 1000);
    const seconds = rest % 60;
    rest = (rest - seconds) / 60;
    const minutes = rest % 60;
    const hours = (rest - minutes) / 60;
    lastSecondPrefix = `${dayPrefix(day)}${TWO_DIGITS[hours]}:${TWO_DIGITS[minutes]}:${TWO_DIGITS[seconds]}.`;
    lastSecond = second;
  }
  lastMs = ms;
  lastText = `${lastSecondPrefix}${THREE_DIGITS[millis]}Z`;
  return lastText;
}
