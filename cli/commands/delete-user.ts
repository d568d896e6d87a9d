// `trackhook delete-user`: the laptop equivalent of creating a DeletionRequest — one delete
// notification per user to the webhooks of a source, through the normal delivery path.
import { randomUUID } from "node:crypto";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { DEFAULT_NAMESPACE, compileConfig, loadDocuments, type RawDocument } from "../../dataplane/config/mod.ts";
import { hasEnabledDestination, longestRetryMs, publishDeleteNotifications } from "../../dataplane/deletion/mod.ts";
import { purgeDeadLettersOf } from "../../dataplane/admin/mod.ts";
import { EVENTS_STREAM, streamLastSeq } from "../../dataplane/nats/mod.ts";
import { UsageError, natsUrl } from "../args.ts";
import { connectAdmin, fail, noEventsStream, qualifiedName } from "./replay.ts";
import type { Command } from "./types.ts";
import { USER_ID_PATTERN } from "../../schema/mod.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";
import { jsonLine } from "./terminal.ts";

const USER_ID = new RegExp(USER_ID_PATTERN, "u");

export const deleteUserCommand: Command = {
  exitWhenDone: true,
  name: "delete-user",
  summary: "Send delete notifications for users to a source's webhooks (DeletionRequest without a cluster)",
  usage: `trackhook delete-user --config <file|dir> --source <ns/name> --user-id <id> [--user-id <id> ...] --nats <url> [--json]

  --config <file|dir>        the config \`trackhook dev\`/\`deliver\` runs with (to find the source's webhooks)
  --source <ns/name>         the Source (namespace "default" when omitted)
  --user-id <id>             a user to delete; repeat for more (up to 5000)
  --dead-letters-only        send no notification: only remove the users' dead letters (run it once
                             the retries of their messages are over, at the time a run prints)
  --request-id <id>          names the request: running again with the same id within the stream's
                             duplicate window (--duplicate-window, 10m by default) sends nothing twice
                             (default: a new id, so every run notifies again)
  --json                     the result as one JSON line: {"source","requestId","stored","duplicates",
                             "deadLettersRemoved","deadLettersUntil"} ({"source","deadLettersRemoved"}
                             with --dead-letters-only)
  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}`,
  flags: {
    config: { type: "string" }, source: { type: "string" }, "user-id": { type: "string", multiple: true },
    "request-id": { type: "string" }, "dead-letters-only": { type: "boolean" }, json: { type: "boolean" }, nats: { type: "string" },
  },
  async run(values) {
    if (!values.config) throw new UsageError("--config <file|dir> is required");
    const { namespace, name } = qualifiedName("source", values.source);
    const userIds = [...new Set((values["user-id"] as unknown as string[] | undefined) ?? [])];
    if (userIds.length === 0) throw new UsageError("--user-id <id> is required (repeat it for several users)");
    if (userIds.length > 5000) throw new UsageError(`at most 5000 users per request, not ${userIds.length}`);
    if (userIds.some((id) => id.length === 0 || id.length > 256)) throw new UsageError("--user-id: ids are 1 to 256 characters");
    const odd = userIds.find((id) => !USER_ID.test(id));
    if (odd !== undefined) throw new UsageError(`--user-id ${JSON.stringify(odd)}: no whitespace at either end and no control characters (it would notify a user who does not exist)`);
    if (values["dead-letters-only"] && values["request-id"]) throw new UsageError("--dead-letters-only sends no notification: it takes no --request-id");
    const json = Boolean(values.json as unknown);
    const source = `${namespace}/${name}`; // as --json names it
    const url = natsUrl(values, { orDev: true });
    // The destinations, and the Sources by name: delivery's files, which hold no write key, will do.
    const documents = loadDocuments(values.config);
    const config = compileConfig(documents, "destinations");
    if (!documents.some((doc) => isSource(doc, namespace, name))) {
      throw new UsageError(`no Source ${namespace}/${name} in ${values.config}`);
    }
    const nc = await connectAdmin(url, "trackhook-delete-user");
    if (!nc) return;
    try {
      const js = jetstream(nc);
      const jsm = await jetstreamManager(nc);
      // trackhook's own copies that `replay` could send again go in any case, even when no
      // destination is enabled now (a disabled one may still have the user's dead letters).
      const purge = async () => (await purgeDeadLettersOf(js, jsm, { namespace, sources: [name], userIds })).removed;
      const removedNote = (removed: number) => (removed > 0 ? `; ${removed} of their dead letters removed` : "");
      if (values["dead-letters-only"]) {
        const removed = await purge();
        process.stdout.write(
          json
            ? jsonLine({ source, deadLettersRemoved: removed })
            : `${removed} dead letters of ${userIds.length === 1 ? "the user" : `the ${userIds.length} users`} removed from ${namespace}/${name}'s destinations\n`,
        );
        return;
      }
      if (!hasEnabledDestination(config, namespace, name)) {
        fail(`Source ${namespace}/${name} has no enabled WebhookDestination: nobody to notify, nothing sent${removedNote(await purge())}`);
        return;
      }
      // Said before a request id is given out (found by a CLI review: a "JetStream is not enabled"
      // stack trace, on a NATS that had JetStream but no ingest yet).
      if ((await streamLastSeq(jsm, EVENTS_STREAM)) === undefined) {
        fail(`${noEventsStream(url)}; nothing sent`);
        return;
      }
      const requestId = values["request-id"] ?? randomUUID();
      // Said first: a run that fails half-way is finished by running again with this id.
      process.stderr.write(`request ${requestId} (to finish it if this run fails: --request-id ${requestId})\n`);
      const { stored, duplicates } = await publishDeleteNotifications(js, {
        namespace, source: name, requestId, userIds, timestamp: new Date().toISOString(),
      });
      const removed = await purge();
      // What the operator does by itself (status.finalPurgeAt), a person does here: a message of
      // theirs still being retried can become a dead letter until its retry window ends.
      const until = new Date(Date.now() + (await longestRetryMs(jsm)));
      if (json) {
        process.stdout.write(jsonLine({
          source, requestId, stored, duplicates, deadLettersRemoved: removed, deadLettersUntil: until.toISOString(),
        }));
        return;
      }
      process.stdout.write(
        `request ${requestId}: ${stored} delete notifications stored for ${namespace}/${name}` +
          (duplicates > 0 ? ` (${duplicates} already sent by this request before)` : "") + removedNote(removed) + "\n",
      );
      process.stdout.write(
        `messages of ${userIds.length === 1 ? "this user" : "these users"} still being retried can become dead letters until ${until.toISOString()}: ` +
          `run delete-user again then, for the same users with --dead-letters-only, to remove those too\n`,
      );
    } finally {
      await nc.close();
    }
  },
};

function isSource({ body }: RawDocument, namespace: string, name: string): boolean {
  const { kind, metadata } = (body ?? {}) as { kind?: unknown; metadata?: { name?: unknown; namespace?: unknown } };
  return kind === "Source" && metadata?.name === name && (metadata.namespace ?? DEFAULT_NAMESPACE) === namespace;
}
