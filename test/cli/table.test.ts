// The admin commands' tables show what senders chose (a messageId comes from any browser with
// the public write key): control and format characters are shown, never sent to the terminal.
import { describe, expect, it } from "vitest";
import { attemptsTable } from "../../cli/commands/attempts.ts";
import { deadLetterRow } from "../../cli/commands/dead-letters.ts";
import { table } from "../../cli/commands/table.ts";
import { jsonLine } from "../../cli/commands/terminal.ts";

const hostile = "c1\u009b2J\u009d0;pwned\u009c\u202egnp.exe\u200b";

describe("admin tables", () => {
  it("show C1 controls, bidi overrides and zero-width characters escaped (regression: printed raw, a terminal obeyed them)", () => {
    const text = attemptsTable([{
      destination: "default/crm", url: "https://hooks.example.com/x", messageId: hostile, streamSequence: 1, attempt: 1,
      outcome: "delivered", status: 200, latencyMs: 3, at: "2026-11-22T10:00:00.000Z", response: "ok\u001b[31m",
    }]);
    expect(text.replace(/\n/g, "")).not.toMatch(/[\p{Cc}\p{Cf}]/u);
    expect(text).toContain("c1\\u{9b}2J\\u{9d}0;pwned\\u{9c}\\u{202e}gnp.exe\\u{200b}");
    const row = deadLetterRow({ at: "2026-11-22T10:00:00.000Z", messageId: hostile, reason: "permanent_failure", attempts: 1, seq: 1 } as Parameters<typeof deadLetterRow>[0]);
    expect(table(["TIME", "MESSAGE ID", "TYPE", "SOURCE", "REASON", "ATTEMPTS", "LAST"], [row])).toContain("\\u{202e}gnp.exe");
  });

  it("lay out 200,000 rows (regression: `trackhook attempts` of a busy destination failed, Maximum call stack size exceeded)", () => {
    const rows = Array.from({ length: 200_000 }, (_, i) => [`m-${i}`, i === 123_456 ? "the longest cell" : "ok"]);
    const lines = table(["MESSAGE ID", "RESULT"], rows).trimEnd().split("\n");
    expect(lines).toHaveLength(200_001);
    expect(lines[0]).toBe("MESSAGE ID  RESULT");
    expect(lines.at(-1)).toBe("m-199999    ok");
  });

  it("--json and tail lines escape them as JSON does, so they parse to the same value", () => {
    const value = { messageId: hostile, emoji: "\u{1F389}", tag: "\u{E0041}" };
    const line = jsonLine(value);
    expect(line.replace(/\n$/, "")).not.toMatch(/[\p{Cc}\p{Cf}]/u);
    expect(line).toContain("\\u009b2J");
    expect(JSON.parse(line)).toEqual(value);
  });

  it("leave ordinary text, accents and emoji as they are", () => {
    expect(table(["A", "B"], [["café", "🎉 ok"]])).toBe("A     B\ncafé  🎉 ok\n");
  });
});
