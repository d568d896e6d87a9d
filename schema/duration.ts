// Go-style durations ("500ms", "5s", "1h30m"), the form Kubernetes users write in CRDs.

export const DURATION_PATTERN = "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$";

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds of a duration string; throws on a malformed one. */
export function parseDuration(text: string): number {
  if (!new RegExp(DURATION_PATTERN).test(text)) {
    throw new TypeError(`invalid duration "${text}" (expected e.g. 500ms, 5s, 10m, 4h, 1h30m)`);
  }
  let total = 0;
  for (const [, amount, , unit] of text.matchAll(/([0-9]+(\.[0-9]+)?)(ms|s|m|h)/g)) {
    total += Number(amount) * UNIT_MS[unit as string]!;
  }
  return Math.round(total);
}

/** A duration as parseDuration reads it, largest units first: 300000 → "5m", 5400000 → "1h30m". */
export function formatDuration(ms: number): string {
  let rest = Math.max(0, Math.round(ms));
  let text = "";
  for (const [unit, size] of [["h", 3_600_000], ["m", 60_000], ["s", 1000]] as const) {
    if (rest >= size) {
      text += `${Math.floor(rest / size)}${unit}`;
      rest %= size;
    }
  }
  return rest > 0 || text === "" ? `${text}${rest}ms` : text;
}
