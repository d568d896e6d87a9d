// isoTimestamp must give exactly what Date.prototype.toISOString gives, wherever it takes a
// shortcut (the remembered date part) and wherever it falls back to the built-in.
import { describe, expect, it } from "vitest";
import { isoTimestamp } from "../../dataplane/iso-time.ts";

const builtIn = (ms: number) => new Date(ms).toISOString();

describe("isoTimestamp", () => {
  it("equals toISOString at the edges of days, months, leap days, years and its own range", () => {
    const edges = [
      0, 1, 999, 1000, 59_999, 60_000, 3_599_999, 3_600_000, 86_399_999, 86_400_000,
      Date.UTC(2024, 1, 28, 23, 59, 59, 999), Date.UTC(2024, 1, 29), Date.UTC(2024, 2, 1),
      Date.UTC(1999, 11, 31, 23, 59, 59, 999), Date.UTC(2000, 0, 1), Date.UTC(2100, 1, 28, 12),
      Date.UTC(9999, 11, 31, 23, 59, 59, 999), Date.UTC(10000, 0, 1), Date.UTC(275760, 8, 13),
      -1, -86_400_000, Date.UTC(-1, 0, 1), Date.UTC(1969, 11, 31, 23, 59, 59, 999), -8.64e15, 8.64e15,
      1.5, 1_768_471_200_000.25,
    ];
    for (const ms of edges) expect(isoTimestamp(ms), String(ms)).toBe(builtIn(ms));
  });

  it("equals toISOString for 100,000 random instants between year 0 and 9999, in random order", () => {
    for (let i = 0; i < 100_000; i++) {
      const ms = Math.floor((Math.random() * 2 - 0.1) * 253_402_300_800_000);
      expect(isoTimestamp(ms)).toBe(builtIn(ms));
    }
  });

  it("equals toISOString for instants spread over more days than it remembers", () => {
    for (let day = 0; day < 3_000; day++) {
      const ms = Date.UTC(2020, 0, 1) + day * 86_400_000 + (day * 7_919_321) % 86_400_000;
      expect(isoTimestamp(ms)).toBe(builtIn(ms));
    }
  });

  it("equals toISOString for repeated instants and runs within one second (the remembered second and result)", () => {
    const start = Date.UTC(2026, 0, 15, 10, 0, 59, 990);
    for (const ms of [start, start, start + 1, start + 9, start + 10, start + 10, start - 1000, start + 10]) {
      expect(isoTimestamp(ms), String(ms)).toBe(builtIn(ms));
    }
  });

  it("throws RangeError for an invalid time value, as toISOString does", () => {
    for (const ms of [NaN, Infinity, -Infinity, 8.64e15 + 1]) expect(() => isoTimestamp(ms)).toThrow(RangeError);
  });
});
