#!/usr/bin/env -S node --max-semi-space-size=16 --no-allocation-site-pretenuring --heap-growing-percent=50
// The `trackhook` command: one binary, one subcommand per component.
//
// The shebang's flags (the image's ENTRYPOINT repeats them; run the file itself, or pass them to node):
// - V8 sizes the young generation from the machine's memory (128 MB on a 24 GB host), which
//   doubled the ingest's RSS for no throughput; 16 MB halves peak RSS and measured equal or better
//   throughput (bench/ingest.ts).
// - V8 decides from sampled survival rates to allocate some object literals straight into the old
//   generation. Under /v1/batch load it did so for objects that live
//   a few milliseconds: the old generation then filled with garbage, ten full GCs ran in 5 s
//   instead of none, and peak RSS was 230-246 MB instead of 145-165 MB. bench/ingest.ts: 13 of
//   18 runs without the flag went that way, none of 9 with it.
// - After a full GC, V8 lets the old generation grow to up to 4x what survived before the next
//   one, sized for a machine's memory rather than a container's. The ingest keeps ~30 MB alive,
//   yet old space grew to 70+ MB of garbage between full GCs whenever JetStream paused: peak RSS
//   197-248 MB. Growing by half at most keeps it at 150-160 MB for a few more, short, full GCs
//   and equal throughput (bench/ingest.ts). It bounds growth without capping the heap, so a burst
//   of large batches still gets the memory it needs.
import { parseArgs } from "node:util";
import { ConfigError } from "../dataplane/config/mod.ts";
import { NatsAuthError, NatsServerNotFoundError } from "../dataplane/nats/mod.ts";
import { UsageError } from "./args.ts";
import { devCommand } from "./commands/dev.ts";
import { deliverCommand } from "./commands/deliver.ts";
import { deleteUserCommand } from "./commands/delete-user.ts";
import { operatorCommand } from "./commands/operator.ts";
import { attemptsCommand } from "./commands/attempts.ts";
import { ingestCommand } from "./commands/ingest.ts";
import { replayCommand } from "./commands/replay.ts";
import { tailCommand } from "./commands/tail.ts";
import type { Command } from "./commands/types.ts";

const COMMANDS: Command[] = [devCommand, ingestCommand, deliverCommand, replayCommand, attemptsCommand, tailCommand, deleteUserCommand, operatorCommand];

function help(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `trackhook: a self-hosted, Segment-compatible Tracking API with webhook delivery

Usage: trackhook <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join("\n")}

Run \`trackhook <command> --help\` for a command's options.
`;
}

async function main(argv: string[]): Promise<void> {
  const [name, ...rest] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") {
    process.stdout.write(help());
    return;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) throw new UsageError(`unknown command "${name}"\n\n${help()}`);
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: rest, options: { ...command.flags, help: { type: "boolean", short: "h" } }, strict: true }));
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n\nUsage: ${command.usage}`);
  }
  if (values.help) {
    process.stdout.write(`${command.summary}\n\nUsage: ${command.usage}\n`);
    return;
  }
  await command.run(values as Record<string, string | undefined>);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof UsageError || err instanceof ConfigError || err instanceof NatsServerNotFoundError || err instanceof NatsAuthError) {
    process.stderr.write(`trackhook: ${err.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`trackhook: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
