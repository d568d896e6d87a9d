// `trackhook attempts`: a destination's delivery attempts (every URL of every try), oldest first.
import { readAttempts } from "../../dataplane/admin/mod.ts";
import type { AttemptRecord } from "../../dataplane/delivery/mod.ts";
import { integerFlag, natsUrl, sinceFlag } from "../args.ts";
import { connectAdmin, qualifiedName, reportNothingFound } from "./replay.ts";
import { table } from "./table.ts";
import type { Command } from "./types.ts";
import { jsonLine } from "./terminal.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";

/** How much of a response body the table shows. */
const RESPONSE_CHARS = 60;

const printable = (text: string) => text.replace(/\p{Cc}+/gu, " ").trim();

export function attemptRow(r: AttemptRecord): string[] {
  const result = r.status !== undefined ? String(r.status) : (r.error ?? r.outcome);
  const response = r.response ? printable(r.response) : r.detail ? `(${printable(r.detail)})` : "";
  return [
    r.at, r.messageId, r.replay ? `${r.attempt} (replay)` : String(r.attempt), r.url, result, `${r.latencyMs} ms`,
    response.length > RESPONSE_CHARS ? `${response.slice(0, RESPONSE_CHARS - 1)}…` : response,
  ];
}

export const attemptsTable = (records: AttemptRecord[]): string =>
  table(["TIME", "MESSAGE ID", "ATTEMPT", "URL", "RESULT", "LATENCY", "RESPONSE"], records.map(attemptRow));

export const attemptsCommand: Command = {
  exitWhenDone: true,
  name: "attempts",
  summary: "Show a destination's delivery attempts: status or error, latency, response",
  usage: `trackhook attempts --destination <namespace/name> --nats <url> [--since <duration>] [--message-id <id>] [--limit <n>] [--json]

  --destination <ns/name>    the WebhookDestination (namespace "default" when omitted)
  --since <duration>         only attempts made within this long (e.g. 1h, 30m); a busy
                             destination's history holds millions
  --message-id <id>          only the attempts of this message
  --limit <n>                at most n attempts, oldest first
  --json                     one JSON record per line instead of a table
  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}`,
  flags: {
    destination: { type: "string" }, since: { type: "string" }, "message-id": { type: "string" }, limit: { type: "string" },
    json: { type: "boolean" }, nats: { type: "string" },
  },
  async run(values) {
    const { namespace, name } = qualifiedName("destination", values.destination);
    const url = natsUrl(values, { orDev: true });
    const json = Boolean(values.json as unknown);
    const { "message-id": messageId, since, limit } = values;
    const selection = {
      namespace, destination: name,
      ...(messageId !== undefined ? { messageId } : {}),
      ...(since !== undefined ? { sinceMs: sinceFlag(since) } : {}),
      ...(limit !== undefined ? { limit: integerFlag("limit", limit, 1) } : {}),
    };
    const nc = await connectAdmin(url, "trackhook-attempts");
    if (!nc) return;
    try {
      const records = readAttempts(nc, selection);
      const all: AttemptRecord[] = [];
      let found = 0;
      for await (const r of records) {
        found++;
        // --json streams each record as it comes (the history may be long), without keeping it.
        if (json) process.stdout.write(jsonLine(r));
        else all.push(r);
      }
      // Nothing found: the hint goes to stderr, in --json mode too (stdout stays JSON lines).
      if (found === 0) {
        await reportNothingFound(nc, { namespace, destination: name }, `no attempts recorded for ${namespace}/${name}${messageId !== undefined ? ` and message ${messageId}` : ""}`);
        return;
      }
      if (!json) process.stdout.write(attemptsTable(all));
    } finally {
      await nc.close();
    }
  },
};
