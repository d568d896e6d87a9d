// `trackhook dead-letters`: what is in a destination's dead-letter queue and why, without moving it.
import { readDeadLetters, type DeadLetter } from "../../dataplane/delivery/admin.ts";
import { durationFlag, integerFlag, natsUrl } from "../args.ts";
import { connectAdmin, qualifiedName } from "./replay.ts";
import { table } from "./table.ts";
import type { Command } from "./types.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";

export function deadLetterRow(d: DeadLetter): string[] {
  const last = d.lastStatus !== undefined ? String(d.lastStatus) : (d.lastError ?? "-");
  return [d.at, d.messageId ?? "-", d.type ?? "-", d.source ?? "-", d.reason, String(d.attempts), last];
}

export const deadLettersCommand: Command = {
  name: "dead-letters",
  summary: "List a destination's dead letters: why each was given up, and its last answer",
  usage: `trackhook dead-letters --destination <namespace/name> --nats <url> [--since <duration>] [--limit <n>] [--json]

  --destination <ns/name>    the WebhookDestination (namespace "default" when omitted)
  --since <duration>         only dead letters stored within this long (e.g. 1h, 30m)
  --limit <n>                at most n dead letters, oldest first
  --json                     one JSON record per line instead of a table
  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}

\`trackhook replay\` with the same --destination, --since and --limit moves these back for delivery.`,
  flags: { destination: { type: "string" }, since: { type: "string" }, limit: { type: "string" }, json: { type: "boolean" }, nats: { type: "string" } },
  async run(values) {
    const { namespace, name } = qualifiedName("destination", values.destination);
    const sinceMs = values.since !== undefined ? durationFlag("since", values.since) : undefined;
    const limit = values.limit !== undefined ? integerFlag("limit", values.limit, 1) : undefined;
    const url = natsUrl(values);
    const json = Boolean(values.json as unknown);
    const nc = await connectAdmin(url, "trackhook-dead-letters");
    if (!nc) return;
    try {
      const letters = readDeadLetters(nc, {
        namespace, destination: name, ...(sinceMs !== undefined ? { sinceMs } : {}), ...(limit !== undefined ? { limit } : {}),
      });
      if (json) {
        for await (const d of letters) process.stdout.write(`${JSON.stringify(d)}\n`);
        return;
      }
      const rows: string[][] = [];
      for await (const d of letters) rows.push(deadLetterRow(d));
      if (rows.length === 0) {
        process.stderr.write(`no dead letters for ${namespace}/${name}\n`);
        return;
      }
      process.stdout.write(table(["TIME", "MESSAGE ID", "TYPE", "SOURCE", "REASON", "ATTEMPTS", "LAST"], rows));
    } finally {
      await nc.close();
    }
  },
};
