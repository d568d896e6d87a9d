// Plain-text tables for the admin commands: columns padded to their widest cell, the last one not,
// every cell shown terminal-safe.
import { shownCell } from "./terminal.ts";

export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows.map((row) => row.map(shownCell))];
  const widths = header.map((_, i) => Math.max(...all.map((row) => row[i]!.length)));
  return all.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  ").trimEnd()).join("\n") + "\n";
}
