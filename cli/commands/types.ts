import type { ParseArgsConfig } from "node:util";

export interface Command {
  name: string;
  summary: string;
  usage: string;
  flags: NonNullable<ParseArgsConfig["options"]>;
  run(values: Record<string, string | undefined>): Promise<void>;
}
