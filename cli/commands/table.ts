// Plain-text tables for the admin commands: columns padded to their widest cell, the last one not,
// every cell shown terminal-safe.
import { shownCell } from "./terminal.ts";

export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows.map((row) => row.map(shownCell))];
  // A loop, not Math.max(...cells): spreading 120,000+ arguments overflows the stack.
  const widths = header.map(() => 0);
  for (const row of all) row.forEach((cell, i) => (widths[i] = Math.max(widths[i]!, cell.length)));
  return all.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  ").trimEnd()).join("\n") + "\n";
}
