import type { ParseArgsConfig } from "node:util";

export interface Command {
  name: string;
  summary: string;
  usage: string;
  flags: NonNullable<ParseArgsConfig["options"]>;
  run(values: Record<string, string | undefined>): Promise<void>;
  /**
   * An admin command that is done when run() resolves: the process exits then, instead of
   * waiting for a NATS dial still pending in the background (a second server, a slow timeout).
   */
  exitWhenDone?: boolean;
}
