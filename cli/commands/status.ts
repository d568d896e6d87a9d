// `trackhook status`: per destination, what waits and since when, what was dead-lettered, and the
// last attempt's answer; above them, how full the events stream and the dead-letter queue are.
import { readStatus, type DeliveryStatus, type DestinationStatus, type StatusSelection, type StreamStatus } from "../../dataplane/admin/mod.ts";
import { formatDuration, isDnsLabel } from "../../schema/mod.ts";
import { UsageError, natsUrl } from "../args.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";
import { connectAdmin, qualifiedName } from "./replay.ts";
import { table } from "./table.ts";
import { jsonLine } from "./terminal.ts";
import type { Command } from "./types.ts";

/** A span as a reader takes it in: to the second under an hour, to the minute under two days, then days and hours. */
export function span(ms: number): string {
  if (ms < 1000) return "<1s";
  if (ms < 3_600_000) return formatDuration(Math.round(ms / 1000) * 1000);
  if (ms < 48 * 3_600_000) return formatDuration(Math.round(ms / 60_000) * 60_000);
  const hours = Math.round(ms / 3_600_000);
  return `${Math.floor(hours / 24)}d${hours % 24 ? `${hours % 24}h` : ""}`;
}

const since = (at: string, now: number) => span(Math.max(0, now - Date.parse(at)));
const ago = (at: string | undefined, now: number) => (at === undefined ? "-" : `${since(at, now)} ago`);

/** 1,234,567 */
const count = (n: number) => n.toLocaleString("en-US");

export function bytes(n: number): string {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** "events: 1,234 messages, 1.2 MB of 10 GB (0%), the oldest stored 3h ago, kept 72h" */
export function streamLine(label: string, s: StreamStatus, now: number): string {
  const fill = s.maxBytes !== undefined ? ` of ${bytes(s.maxBytes)} (${Math.floor((100 * s.bytes) / s.maxBytes)}%)` : "";
  const oldest = s.firstAt !== undefined ? `, the oldest stored ${ago(s.firstAt, now)}` : "";
  const kept = s.maxAgeMs !== undefined ? `, kept ${span(s.maxAgeMs)}` : "";
  return `${label}: ${count(s.messages)} message${s.messages === 1 ? "" : "s"}, ${bytes(s.bytes)}${fill}${oldest}${kept}\n`;
}

/** "3s ago: 200 in 2 ms http://a/hook; 500 in 3 ms http://b/hook" (each URL's last, timed by the last answer). */
function lastAttemptCell(d: DestinationStatus, now: number): string {
  const attempts = d.lastAttempts ?? [];
  if (attempts.length === 0) return "-";
  const answeredAt = Math.max(...attempts.map((a) => Date.parse(a.at) + a.latencyMs));
  const answers = attempts.map((a) => `${a.status !== undefined ? String(a.status) : (a.error ?? a.outcome)} in ${a.latencyMs} ms ${a.url}`);
  return `${span(Math.max(0, now - answeredAt))} ago: ${answers.join("; ")}`;
}

/** Messages wait, none is in progress, and no delivery asks for them (readStatus looked twice). */
const nobodyDelivers = (d: DestinationStatus) => d.consumer && d.deliveryPulling === false && (d.waiting ?? 0) > 0 && d.inProgress === 0;

export function statusRow(d: DestinationStatus, now: number): string[] {
  const deadLetters = d.deadLetters === 0 ? "0" : `${count(d.deadLetters)} (last ${ago(d.lastDeadLetterAt, now)})`;
  // Without a consumer, nothing waits for it: the three columns are one statement.
  const delivery = d.consumer
    ? [`${count(d.waiting ?? 0)}${nobodyDelivers(d) ? " (!)" : ""}`, count(d.inProgress ?? 0), d.oldestUndeliveredAt !== undefined ? since(d.oldestUndeliveredAt, now) : "-"]
    : ["no consumer", "-", "-"];
  return [d.destination, ...delivery, deadLetters, lastAttemptCell(d, now)];
}

export function statusText(status: DeliveryStatus, selection: StatusSelection, now = Date.now()): string {
  let text = "";
  if (status.events) text += streamLine("events", status.events, now);
  if (status.deadLetterQueue) text += streamLine("dead-letter queue", status.deadLetterQueue, now);
  if (status.destinations.length === 0) {
    return `${text}${text ? "\n" : ""}no destination${selection.namespace !== undefined ? ` of namespace ${selection.namespace}` : ""} is delivered to or has dead letters\n`;
  }
  text += `${text ? "\n" : ""}${table(["DESTINATION", "WAITING", "IN PROGRESS", "OLDEST UNDELIVERED", "DEAD LETTERS", "LAST ATTEMPT"], status.destinations.map((d) => statusRow(d, now)))}`;
  const idle = status.destinations.filter(nobodyDelivers);
  if (idle.length > 0) {
    text += `\n(!) no delivery is asking for the messages of ${idle.map((d) => d.destination).join(", ")}: is \`dev\` or \`deliver\` running with ${idle.length === 1 ? "it" : "them"} in its config?\n`;
    text += "    (one taken out of the config keeps its messages a minute, in case it comes back; in a cluster, see the Delivering condition)\n";
  }
  return text;
}

export const statusCommand: Command = {
  exitWhenDone: true,
  name: "status",
  summary: "Show each destination's backlog, dead letters and last attempt, and how full the streams are",
  usage: `trackhook status --nats <url> [--destination <ns/name> | --namespace <ns>] [--json]

  Per destination: WAITING (stored, not yet given to delivery), IN PROGRESS (being sent, or
  waiting for its next try, or for its URL's pause after failures to end), OLDEST UNDELIVERED
  (how long the oldest of either has waited), DEAD LETTERS (\`trackhook dead-letters\` lists them,
  \`trackhook replay\` sends them again) and the LAST ATTEMPT's answer from each URL tried last
  (\`trackhook attempts\` has every one). "no consumer": nothing is sent to it (deleted or
  disabled, or not started by any \`deliver\` or \`dev\` yet); its dead letters are kept.

  --destination <ns/name>    only this WebhookDestination (namespace "default" when omitted)
  --namespace <ns>           only the destinations of this namespace
  --json                     one JSON object instead of the text
  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}`,
  flags: { destination: { type: "string" }, namespace: { type: "string" }, json: { type: "boolean" }, nats: { type: "string" } },
  async run(values) {
    if (values.destination !== undefined && values.namespace !== undefined) {
      throw new UsageError("--destination and --namespace: give one (--destination takes <namespace>/<name>)");
    }
    let selection: StatusSelection = {};
    if (values.destination !== undefined) {
      const { namespace, name } = qualifiedName("destination", values.destination);
      selection = { namespace, destination: name };
    } else if (values.namespace !== undefined) {
      if (!isDnsLabel(values.namespace)) throw new UsageError(`--namespace: "${values.namespace}" is not a namespace (lowercase letters, digits and "-")`);
      selection = { namespace: values.namespace };
    }
    const json = Boolean(values.json as unknown);
    const url = natsUrl(values, { orDev: true });
    const nc = await connectAdmin(url, "trackhook-status");
    if (!nc) return;
    try {
      const status = await readStatus(nc, selection);
      process.stdout.write(json ? jsonLine(status) : statusText(status, selection));
      if (!status.events) process.stderr.write("no events stream on this NATS: no ingest (or `dev`) has used it yet; is --nats right?\n");
      const one = selection.namespace !== undefined && "destination" in selection && selection.destination !== undefined ? status.destinations[0] : undefined;
      if (one && !one.consumer && one.deadLetters === 0 && one.lastAttempts === undefined) {
        process.stderr.write(
          `nothing is known of ${one.destination}: no consumer, dead letters or attempts. Is the name right (\`kubectl get webhookdestinations -A\`, or the documents of your --config)? Or it is disabled, or no \`dev\` or \`deliver\` has started it yet\n`,
        );
      }
    } finally {
      await nc.close();
    }
  },
};
