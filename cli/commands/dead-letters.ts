// `trackhook dead-letters`: what is in a destination's dead-letter queue and why, without moving it.
import { readDeadLetters, type DeadLetter } from "../../dataplane/admin/mod.ts";
import { natsUrl } from "../args.ts";
import { SELECTION_FLAGS, SELECTION_HELP, connectAdmin, deadLetterSelection, reportNothingFound } from "./replay.ts";
import { table } from "./table.ts";
import type { Command } from "./types.ts";
import { jsonLine } from "./terminal.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";

export function deadLetterRow(d: DeadLetter): string[] {
  const last = d.lastStatus !== undefined ? String(d.lastStatus) : (d.lastError ?? "-");
  return [d.at, d.messageId ?? "-", d.type ?? "-", d.source ?? "-", d.reason, String(d.attempts), last];
}

export const deadLettersCommand: Command = {
  exitWhenDone: true,
  name: "dead-letters",
  summary: "List a destination's dead letters: why each was given up, and its last answer",
  usage: `trackhook dead-letters --destination <namespace/name> --nats <url> [--since <duration>] [--message-id <id>] [--limit <n>] [--json]

${SELECTION_HELP}
  --json                     one JSON record per line instead of a table
  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}

\`trackhook replay\` with the same selection moves these back for delivery.`,
  flags: { ...SELECTION_FLAGS, json: { type: "boolean" }, nats: { type: "string" } },
  async run(values) {
    const selection = deadLetterSelection(values);
    const { namespace, destination: name } = selection;
    const url = natsUrl(values, { orDev: true });
    const json = Boolean(values.json as unknown);
    const nc = await connectAdmin(url, "trackhook-dead-letters");
    if (!nc) return;
    try {
      const letters = readDeadLetters(nc, selection);
      const rows: string[][] = [];
      let found = 0;
      for await (const d of letters) {
        found++;
        if (json) process.stdout.write(jsonLine(d));
        else rows.push(deadLetterRow(d));
      }
      // Nothing found: the hint goes to stderr, in --json mode too (stdout stays JSON lines).
      if (found === 0) {
        await reportNothingFound(nc, selection, `no dead letters for ${namespace}/${name}`);
        return;
      }
      if (!json) process.stdout.write(table(["TIME", "MESSAGE ID", "TYPE", "SOURCE", "REASON", "ATTEMPTS", "LAST"], rows));
    } finally {
      await nc.close();
    }
  },
};
