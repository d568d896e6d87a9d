// `trackhook dev`'s activity lines: one short human line on stderr per message stored, per
// delivery attempt, per dead letter, per message or request ingest did not take, per webhook URL
// paused or answering again, and per reload of the config. On a laptop
// the question is "did my event arrive, and what did my receiver answer?"; the JSON log says
// only what went wrong, and at most once per 10 s per kind.
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { configChanges, type ConfigReload } from "../dataplane/config/mod.ts";
import type { IngestActivity } from "../dataplane/ingest/mod.ts";
import { parseJson } from "../dataplane/json.ts";
import { ATTEMPTS_STREAM, ATTEMPT_RECORD_SUBJECTS, DLQ_STREAM, DLQ_SUBJECTS, EVENTS_STREAM, EVENTS_SUBJECTS, followStream, parseDlqSubject } from "../dataplane/nats/mod.ts";
import type { AttemptRecord, DeliveryActivity } from "../dataplane/delivery/mod.ts";
import { attemptRecordsIn, deadLetterOf } from "../dataplane/admin/mod.ts";

export interface ActivityFeed {
  /** Hears what ingest did not store (startIngest's `activity`). */
  readonly ingest: IngestActivity;
  /** Hears a URL's pauses (startDelivery's `activity`). */
  readonly delivery: DeliveryActivity;
  /** Hears what a reload of the config files came to (FileConfigProvider.onReload). */
  configReloaded(path: string, reload: ConfigReload): void;
  close(): Promise<void>;
}

type Write = (line: string) => void;

/** Watches the three streams from now on; lines go to `write` (stderr), each ending in "\n". */
export async function startActivityFeed(nc: NatsConnection, write: Write, now: () => Date = () => new Date()): Promise<ActivityFeed> {
  const say = (what: string, who: string, text: string) => write(`${clock(now())}  ${what.padEnd(13)} ${who}  ${escapeControls(text)}\n`);
  const js = jetstream(nc);
  const stop = new AbortController();
  const watching: Array<Promise<void>> = [];
  const watch = async (stream: string, subjects: string, line: (m: JsMsg) => void) => {
    const messages = await followStream(js, stream, subjects, { signal: stop.signal });
    watching.push((async () => {
      for await (const m of messages) {
        try {
          line(m);
        } catch {
          // A line that cannot be made is not worth stopping the others for.
        }
      }
    })());
  };

  await watch(EVENTS_STREAM, EVENTS_SUBJECTS, (m) => {
    const [, , namespace, source] = m.subject.split(".");
    say("stored", `${namespace}/${source}`, describeMessage(parseJson(m.string()) as Record<string, unknown>));
  });
  // A delivery turn's records share a message, a line each.
  await watch(ATTEMPTS_STREAM, ATTEMPT_RECORD_SUBJECTS, (m) => {
    const records = attemptRecordsIn(m.string());
    // A round's records are written together, so the URL that delivered it is in the same message
    // (or, rarely, the next one: records are cut into messages of RECORDS_PER_MESSAGE).
    const round = (r: AttemptRecord) => `${r.destination} ${r.messageId} ${r.attempt}`;
    const delivered = new Set(records.filter((r) => r.outcome === "delivered").map(round));
    for (const record of records) {
      const [what, tail] = record.outcome === "retry" && delivered.has(round(record)) ? ["failed", ", delivered by another URL"] : ATTEMPT_WORDS[record.outcome];
      const answer = record.status !== undefined ? String(record.status) : (record.error ?? "no answer");
      const retried = record.attempt > 1 ? `, attempt ${record.attempt}` : "";
      const detail = record.detail ? ` (${record.detail})` : "";
      say(what, record.destination, `${answer} in ${Math.round(record.latencyMs)} ms from ${record.url}${detail}  [${record.messageId}${retried}${tail}]`);
    }
  });
  await watch(DLQ_STREAM, DLQ_SUBJECTS, (m) => {
    const { namespace, destination } = parseDlqSubject(m.subject) ?? { namespace: "?", destination: "?" };
    const letter = deadLetterOf(m, parseJson(m.string()) as { messageId?: unknown });
    const last = letter.lastStatus ?? letter.lastError;
    const name = `${namespace}/${destination}`;
    say("dead-lettered", name, `${letter.reason}${last !== undefined ? `, last answer ${last}` : ""}  [${String(letter.messageId)}]  (trackhook replay --destination ${name})`);
  });

  return {
    ingest: {
      notAccepted: ({ source, reason, detail, messageId }) => say("not accepted", source, `${reason}: ${detail}${messageId !== undefined ? `  [${messageId}]` : ""}`),
      refused: ({ route, status, code, message }) => say(`refused ${status}`, route, `${code}: ${message}`),
    },
    delivery: {
      urlPaused: ({ destination, url, reason, forMs, error }) => say("paused", destination, `${url}: ${
        reason === "retry_after" ? `it asked to wait (Retry-After): nothing is sent to it for ${seconds(forMs)}`
          : `no answer${error ? ` (${error})` : ""}: nothing is sent to it for ${seconds(forMs)}, then one message tries it`
      }`),
      urlResumed: ({ destination, url }) => say("resumed", destination, `${url}: answers again; messages are sent to it again`),
    },
    configReloaded: (path, reload) => {
      if (reload.outcome === "refused") say("config refused", path, `the previous config stays: ${reload.problems.join("; ")}`);
      else {
        // A file's time changes with every save, and the destinations read from it with it: what
        // the reader cares for is what a source or webhook does.
        const changes = reload.outcome === "applied" ? configChanges(reload.previous, reload.next) : [];
        say("config", path, changes.length > 0 ? `reloaded: ${changes.join("; ")}` : `${reload.outcome === "valid-again" || reload.recovered ? "valid again" : "reloaded"}: nothing a source or webhook does changed`);
      }
    },
    close: async () => {
      stop.abort();
      await Promise.all(watching);
    },
  };
}

// A retryable failure is not promised a retry: the message's last round fails retryably too, and
// its dead letter's line may come first (found by a review: "will retry" after "dead-lettered").
const ATTEMPT_WORDS: Record<AttemptRecord["outcome"], [string, string]> = {
  delivered: ["delivered", ""],
  retry: ["failed", ", retryable"],
  permanent: ["failed", ", not retried"],
};

/** `track "Signed Up" userId u1 [id]`: what tells one message from the next at a glance. */
export function describeMessage(message: Record<string, unknown>): string {
  const type = String(message.type);
  const quoted = (value: unknown) => (typeof value === "string" ? JSON.stringify(value) : undefined);
  const what = {
    track: quoted(message.event),
    page: quoted(message.name),
    screen: quoted(message.name),
    group: message.groupId !== undefined ? `groupId ${String(message.groupId)}` : undefined,
    alias: message.previousId !== undefined ? `previousId ${String(message.previousId)}` : undefined,
    delete: undefined,
    identify: undefined,
  }[type];
  const who = message.userId !== undefined ? `userId ${String(message.userId)}` : message.anonymousId !== undefined ? `anonymousId ${String(message.anonymousId)}` : undefined;
  return [type, what, who].filter((part) => part !== undefined).join(" ") + `  [${String(message.messageId)}]`;
}

/**
 * Control characters (and bidirectional overrides) as JSON escapes: ids and names come from
 * whoever holds a write key, and a userId with a newline or an ANSI escape would forge lines on
 * the developer's terminal (found by a review).
 */
function escapeControls(text: string): string {
  return text.replace(/[\p{Cc}\u2028\u2029\u202a-\u202e\u2066-\u2069]/gu, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** "5s", "1m", "1m30s" */
function seconds(ms: number): string {
  const s = Math.max(1, Math.round(ms / 1000));
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60 ? `${s % 60}s` : ""}`;
}

/** HH:MM:SS in local time: the terminal's reader compares it with their own clock. */
function clock(at: Date): string {
  return [at.getHours(), at.getMinutes(), at.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}
