// The `trackhook` command's dispatch: parses the subcommand and its flags, runs it, and maps
// errors to exit codes (2: usage, config or credentials; 1: anything else). main.ts loads it
// once the Node version is known to be recent enough.
import { parseArgs } from "node:util";
import { ConfigError } from "../dataplane/config/mod.ts";
import { NatsAuthError, NatsServerNotFoundError, NatsServerTooOldError, StreamIsMirrorError, StreamStorageRefusedError, natsFailureMessage } from "../dataplane/nats/mod.ts";
import { VERSION } from "../dataplane/version.ts";
import { UsageError } from "./args.ts";
import { devCommand } from "./commands/dev.ts";
import { deliverCommand } from "./commands/deliver.ts";
import { deleteUserCommand } from "./commands/delete-user.ts";
import { operatorCommand } from "./commands/operator.ts";
import { attemptsCommand } from "./commands/attempts.ts";
import { statusCommand } from "./commands/status.ts";
import { deadLettersCommand } from "./commands/dead-letters.ts";
import { ingestCommand } from "./commands/ingest.ts";
import { replayCommand } from "./commands/replay.ts";
import { tailCommand } from "./commands/tail.ts";
import type { Command } from "./commands/types.ts";

const COMMANDS: Command[] = [devCommand, ingestCommand, deliverCommand, deadLettersCommand, replayCommand, attemptsCommand, statusCommand, tailCommand, deleteUserCommand, operatorCommand];

function help(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `trackhook: a self-hosted, Segment-compatible Tracking API with webhook delivery

Usage: trackhook <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join("\n")}

Run \`trackhook <command> --help\` (or \`trackhook help <command>\`) for a command's options;
\`trackhook --version\` prints the version.

Exit status: 0 done (a listing that finds nothing too; a service stopped by a signal once it has
finished its work); 1 failed (NATS lost, nothing to act on, output not written); 2 a usage,
config or credentials error, or a NATS without what trackhook needs (JetStream, permissions);
128 + the signal's number when a second signal cut a service's shutdown short (130 for Ctrl-C).
`;
}

const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];

async function main(argv: string[]): Promise<void> {
  let [name, ...rest] = argv;
  if (name === "--version" || name === "-v" || name === "-V" || name === "version") {
    process.stdout.write(`trackhook ${VERSION}\n`);
    return;
  }
  // `trackhook help dev` is `trackhook dev --help`.
  if (name === "help" && rest.length > 0) [name, rest] = [rest[0], ["--help"]];
  if (!name || name === "--help" || name === "-h" || name === "help") {
    process.stdout.write(help());
    return;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) throw new UsageError(`unknown command "${name}"\n\n${help()}`);
  let values: Record<string, string | boolean | undefined>;
  const options: Command["flags"] = { ...command.flags, help: { type: "boolean", short: "h" } };
  try {
    const parsed = parseArgs({ args: rest, options, strict: true, tokens: true });
    values = parsed.values as typeof values; // arrays only for `multiple` flags, which their commands read as such
    // parseArgs keeps the last of a repeated flag: `--source a --source b` silently did b only.
    const seen = new Set<string>();
    for (const token of parsed.tokens) {
      if (token.kind !== "option" || options[token.name]?.multiple) continue;
      if (seen.has(token.name)) throw new Error(`--${token.name} was given more than once; it takes one value${token.name === "source" ? " (run the command once per source)" : ""}`);
      seen.add(token.name);
    }
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n\nUsage: ${command.usage}`);
  }
  if (values.help) {
    process.stdout.write(`${command.summary}\n\nUsage: ${command.usage}\n`);
    return;
  }
  const level = values["log-level"];
  if (typeof level === "string" && !LOG_LEVELS.includes(level)) throw new UsageError(`--log-level: "${level}" is not one of ${LOG_LEVELS.join(", ")}`);
  // The chart sets it; a level pino does not know was a stack trace at the first log line. Only
  // where it is used: a service (the admin commands do not log) without --log-level, and empty
  // counts as unset (a compose file's unset ${LOG_LEVEL}).
  const envLevel = process.env.TRACKHOOK_LOG_LEVEL;
  if (SERVICES.has(command.name) && level === undefined && envLevel && !LOG_LEVELS.includes(envLevel)) {
    throw new UsageError(`TRACKHOOK_LOG_LEVEL: "${envLevel}" is not one of ${LOG_LEVELS.join(", ")}`);
  }
  // The V8 flags of main.ts's first line are lost when node is given the file (`node
  // dist/cli/main.js`): a soak run that way measured the ingest's RSS at 220 MB where the flags
  // hold it near 150. V8 reads them only at start, so they cannot be set from here.
  if (SERVICES.has(command.name) && !startedWithMemoryFlags()) {
    process.stderr.write("trackhook: note: started without the V8 flags of dist/cli/main.js's first line (as `node dist/cli/main.js` does), so it uses more memory; run the file itself (`npx trackhook`), or give node those flags\n");
  }
  // A reader that goes away (`| head`) ends the output, not with an EPIPE stack trace. Any other
  // failure to write (a full disk) is a failure: exit 0 told a script the output was complete
  // (found by a CLI review).
  if (command.exitWhenDone) {
    process.stdout.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code === "EPIPE") process.exit(process.exitCode ?? 0);
      process.stderr.write(`trackhook: cannot write the output: ${err.code ?? err.message}\n`);
      process.exit(1);
    });
  }
  await command.run(values as Record<string, string | undefined>);
  if (command.exitWhenDone) process.exit(process.exitCode ?? 0);
}

/** The commands that run as services, for which memory matters. */
const SERVICES = new Set(["ingest", "deliver", "dev", "operator"]);

function startedWithMemoryFlags(): boolean {
  return [...process.execArgv, ...(process.env.NODE_OPTIONS ?? "").split(/\s+/)].some((arg) => arg.startsWith("--max-semi-space-size"));
}

main(process.argv.slice(2)).catch((err: unknown) => {
  const ours = err instanceof UsageError || err instanceof ConfigError || err instanceof NatsServerNotFoundError || err instanceof NatsAuthError || err instanceof NatsServerTooOldError || err instanceof StreamStorageRefusedError || err instanceof StreamIsMirrorError;
  const fixable = ours ? err.message : natsFailureMessage(err);
  if (fixable !== undefined) {
    process.stderr.write(`trackhook: ${fixable}\n`);
    process.exit(2);
  }
  if (err instanceof Error && err.name === "TimeoutError") {
    // A NATS request with no answer in time: common and brief while a cluster elects a leader.
    process.stderr.write("trackhook: NATS did not answer in time (in a NATS cluster, a JetStream leader election takes a few seconds); try again\n");
    process.exit(1);
  }
  process.stderr.write(`trackhook: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
