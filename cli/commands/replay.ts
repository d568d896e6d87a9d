// `trackhook replay`: moves a destination's dead letters back for delivery to that destination only.
// Also holds what the admin commands (replay, dead-letters, attempts, tail) share: the NATS flag and names.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { REPLAY_IN_FLIGHT, ReplayInterruptedError, ReplayTargetError, destinationConsumer, replayDeadLetters, type DeadLetterSelection, type DestinationRef } from "../../dataplane/admin/mod.ts";
import { EVENTS_STREAM, NatsAuthError, assertNoCredentialsInUrl, isAuthError, natsAuthOptions } from "../../dataplane/nats/mod.ts";
import { DEFAULT_NAMESPACE } from "../../dataplane/config/mod.ts";
import { isDnsLabel } from "../../schema/mod.ts";
import { UsageError, integerFlag, natsUrl, sinceFlag } from "../args.ts";
import type { Command } from "./types.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";
import { jsonLine } from "./terminal.ts";

/** `<namespace>/<name>` or `<name>` (namespace `default`), both DNS labels. */
export function qualifiedName(flag: string, text: string | undefined): { namespace: string; name: string } {
  if (text === undefined || text === "") throw new UsageError(`--${flag} <namespace/name> is required`);
  const parts = text.split("/");
  const [namespace, name] = parts.length === 1 ? [DEFAULT_NAMESPACE, parts[0]!] : [parts[0]!, parts[1] ?? ""];
  if (parts.length > 2 || !isDnsLabel(namespace) || !isDnsLabel(name)) {
    throw new UsageError(`--${flag}: "${text}" is not <namespace>/<name> or <name> (lowercase letters, digits and "-")`);
  }
  return { namespace, name };
}

/** One connection attempt: an admin command fails at once (exit 1, no stack) when NATS is not there. */
export async function connectAdmin(url: string, name: string): Promise<NatsConnection | undefined> {
  // Before connecting, so the URL printed below never carries credentials (NatsAuthError: exit 2).
  assertNoCredentialsInUrl(url);
  const auth = natsAuthOptions(process.env, url);
  // A team's own admin user subscribes to its own inboxes only: on the shared _INBOX.>, it could
  // read the replies other users get (another team's dead letters). docs/nats-permissions.conf.
  const inboxPrefix = process.env.TRACKHOOK_NATS_INBOX_PREFIX;
  if (inboxPrefix !== undefined && !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(inboxPrefix)) {
    throw new UsageError(`TRACKHOOK_NATS_INBOX_PREFIX: "${inboxPrefix}" is not a NATS subject without wildcards (such as _INBOX_team_a)`);
  }
  try {
    return await connect({ ...auth, ...(inboxPrefix ? { inboxPrefix } : {}), servers: url.split(",").map((s) => s.trim()), name, noAsyncTraces: true, timeout: 5_000 });
  } catch (err) {
    if (isAuthError(err)) throw new NatsAuthError(`NATS at ${url} refused the credentials: ${(err as Error).message}`);
    fail(`cannot connect to NATS at ${url}: ${(err as Error).message}`);
    return undefined;
  }
}

/** Prints a failure the operator can act on, without a stack trace. */
export function fail(message: string): void {
  process.stderr.write(`trackhook: ${message}\n`);
  process.exitCode = 1;
}

/** A NATS no ingest has used yet (or --nats names another server): said instead of a stack trace. */
export function noEventsStream(url: string): string {
  return `${EVENTS_STREAM} is not on NATS at ${url}: no ingest has run against it yet (start \`trackhook ingest\` or \`dev\` first), or --nats names another server`;
}

/**
 * What `dead-letters` and `attempts` say when they find nothing; for a destination delivery does
 * not know, it asks whether the name is right (a removed destination's records remain).
 */
export async function reportNothingFound(nc: NatsConnection, ref: DestinationRef, nothing: string): Promise<void> {
  // null: NATS could not tell, and a guess would mislead; no hint then.
  const known = (await destinationConsumer(nc, ref).catch(() => null)) !== undefined;
  const hint = "no WebhookDestination of that name is being delivered: is the name right? (`kubectl get webhookdestinations -A`, or the documents of your --config)";
  process.stderr.write(`${nothing}${known ? "" : `; ${hint}`}\n`);
}

/** The flags that pick dead letters, shared by `replay` and `dead-letters`. */
export const SELECTION_FLAGS = {
  destination: { type: "string" }, since: { type: "string" }, "message-id": { type: "string" }, limit: { type: "string" },
} as const;
export const SELECTION_HELP = `  --destination <ns/name>    the WebhookDestination (namespace "default" when omitted)
  --since <duration>         only dead letters stored within this long (e.g. 1h, 30m)
  --message-id <id>          only the dead letters of this message
  --limit <n>                at most n dead letters, oldest first`;

export function deadLetterSelection(values: Record<string, string | undefined>): DeadLetterSelection {
  const { namespace, name } = qualifiedName("destination", values.destination);
  const { since, limit, "message-id": messageId } = values;
  return {
    namespace, destination: name,
    ...(since !== undefined ? { sinceMs: sinceFlag(since) } : {}),
    ...(limit !== undefined ? { limit: integerFlag("limit", limit, 1) } : {}),
    ...(messageId !== undefined ? { messageId } : {}),
  };
}

export const replayCommand: Command = {
  exitWhenDone: true,
  name: "replay",
  summary: "Move a destination's dead letters back for delivery (to that destination only)",
  usage: `trackhook replay --destination <namespace/name> --nats <url> [--since <duration>] [--message-id <id>] [--limit <n>] [--rate <n>] [--json]

${SELECTION_HELP}
  --rate <n>                 at most n dead letters a second (default: as fast as NATS takes them; on an
                             installation shared with others, a few hundred keeps their deliveries quick)
  --json                     the result as one JSON line: {"destination","replayed"} (and "interrupted")
  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}`,
  flags: { ...SELECTION_FLAGS, rate: { type: "string" }, json: { type: "boolean" }, nats: { type: "string" } },
  async run(values) {
    const selection = deadLetterSelection(values);
    const perSecond = values.rate === undefined ? undefined : integerFlag("rate", values.rate, 1, 1_000_000);
    const { namespace, destination: name } = selection;
    const json = Boolean(values.json as unknown);
    const printResult = (replayed: number, interrupted = false) =>
      process.stdout.write(
        json
          ? jsonLine({ destination: `${namespace}/${name}`, replayed, ...(interrupted ? { interrupted } : {}) })
          : `replayed ${count(replayed, "message")} to ${namespace}/${name}\n`,
      );
    const url = natsUrl(values, { orDev: true });
    const nc = await connectAdmin(url, "trackhook-replay");
    if (!nc) return;
    // A long replay says how far it has got, every few seconds (on stderr: stdout keeps the result).
    let moved = 0;
    const progress = setInterval(() => process.stderr.write(`replaying to ${namespace}/${name}: ${count(moved, "message")} so far\n`), PROGRESS_EVERY_MS);
    // Ctrl-C lets the dead letters being moved finish, so that none is left both replayed and in
    // the DLQ (to be delivered twice by a replay after the duplicate window), and says how many
    // moved. A second one exits at once.
    const stop = new AbortController();
    const onSignal = (signal: NodeJS.Signals) => {
      if (stop.signal.aborted) process.exit(130);
      process.stderr.write(`${signal}: finishing the dead letters being moved; again to exit at once (up to ${REPLAY_IN_FLIGHT} may then be both replayed and still in the DLQ)\n`);
      stop.abort(new Error(`stopped by ${signal}; the rest are still in the DLQ`));
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    try {
      const { replayed } = await replayDeadLetters(nc, { ...selection, onProgress: (n) => (moved = n), signal: stop.signal, ...(perSecond !== undefined ? { perSecond } : {}) });
      printResult(replayed);
      if (replayed === 0 && selection.messageId !== undefined) {
        process.stderr.write(`no dead letter of message ${selection.messageId}${selection.sinceMs !== undefined ? " in that time" : ""}: \`trackhook dead-letters --destination ${namespace}/${name}\` lists them\n`);
      }
    } catch (err) {
      if (err instanceof ReplayTargetError) fail(err.message);
      else if (err instanceof ReplayInterruptedError) {
        printResult(err.replayed, true);
        fail(err.message);
      } else throw err;
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      clearInterval(progress);
      await nc.close();
    }
  },
};

const PROGRESS_EVERY_MS = 5_000;

const count = (n: number, noun: string) => `${n} ${noun}${n === 1 ? "" : "s"}`;
