// Rules the resource schema states once for both the CRD (CEL) and compile: they must agree with
// what the sender and the API server actually do.
import { validateHeaderValue } from "node:http";
import { describe, expect, it } from "vitest";
import { HEADER_VALUE, RETRY_WINDOW_BOUNDS, TIMEOUT_BOUNDS, WebhookDestinationSpec, formatDuration, parseDuration } from "../../schema/mod.ts";

describe("the WebhookDestination schema", () => {
  it("takes exactly the header values HTTP clients send (node:http and undici share the check)", () => {
    const pattern = new RegExp(HEADER_VALUE);
    const differing: string[] = [];
    const codePoints = [...Array.from({ length: 0x300 }, (_, i) => i), 0x2028, 0xfeff, 0x1f600];
    for (const codePoint of codePoints) {
      const text = `a${String.fromCodePoint(codePoint)}b`;
      let sent = true;
      try {
        validateHeaderValue("x-test", text);
      } catch {
        sent = false;
      }
      if (pattern.test(text) !== sent) differing.push(`U+${codePoint.toString(16)}`);
    }
    expect(differing).toEqual([]);
  });

  it("bounds timeout and retryWindow within the spec's defaults, and a retry window of seconds for tests", () => {
    const ms = (bounds: { min: string; max: string }) => [parseDuration(bounds.min), parseDuration(bounds.max)];
    const [timeoutMin, timeoutMax] = ms(TIMEOUT_BOUNDS);
    const [windowMin, windowMax] = ms(RETRY_WINDOW_BOUNDS);
    expect(timeoutMin).toBeLessThanOrEqual(5_000); // the spec's 5 s default
    expect(timeoutMax).toBeGreaterThanOrEqual(5_000);
    // ack_wait is timeout + 30 s; the chart's 60 s grace period must cover a request in flight at shutdown.
    expect(timeoutMax).toBeLessThanOrEqual(30_000);
    expect(windowMin).toBeLessThanOrEqual(2_000); // test/delivery uses 2 s windows
    expect(windowMax).toBeGreaterThanOrEqual(4 * 3_600_000); // the spec's four hours
    expect(WebhookDestinationSpec.properties.timeout.default).toBe("5s");
    expect(WebhookDestinationSpec.properties.retryWindow.default).toBe("4h");
  });
});

describe("formatDuration", () => {
  it("writes what parseDuration reads back, largest units first", () => {
    for (const [ms, text] of [[300_000, "5m"], [5_400_000, "1h30m"], [2_000, "2s"], [1_500, "1s500ms"], [0, "0ms"], [14_400_000, "4h"]] as const) {
      expect(formatDuration(ms)).toBe(text);
      expect(parseDuration(text)).toBe(ms);
    }
  });
});
