// `trackhook tail`: prints the messages stored from now on (or from --since ago), one JSON line
// each, until Ctrl-C.
import { once } from "node:events";
import { jetstreamManager } from "@nats-io/jetstream";
import { tail } from "../../dataplane/admin/mod.ts";
import { EVENTS_STREAM, hasMessagesOn, isStreamNotFound, sourceSubjects } from "../../dataplane/nats/mod.ts";
import { natsUrl, sinceFlag } from "../args.ts";
import { connectAdmin, fail, noEventsStream, qualifiedName } from "./replay.ts";
import type { Command } from "./types.ts";
import { jsonLine } from "./terminal.ts";
import { NATS_AUTH_HELP } from "./nats-help.ts";

export const tailCommand: Command = {
  name: "tail",
  summary: "Print messages as they are stored, one JSON line each, until Ctrl-C",
  usage: `trackhook tail --nats <url> [--source <namespace/name>] [--since <duration>]

  --source <ns/name>         only this Source's messages (namespace "default" when omitted)
  --since <duration>         first print the messages stored within this long (e.g. 10m, 1h),
                             then the new ones; without it, only new ones
  --nats <url>               NATS server URL(s), comma-separated (or TRACKHOOK_NATS_URL)${NATS_AUTH_HELP}`,
  flags: { source: { type: "string" }, since: { type: "string" }, nats: { type: "string" } },
  async run(values) {
    const source = values.source !== undefined ? qualifiedName("source", values.source) : undefined;
    const sinceMs = values.since !== undefined ? sinceFlag(values.since) : undefined;
    const url = natsUrl(values, { orDev: true });
    const nc = await connectAdmin(url, "trackhook-tail");
    if (!nc) return;
    const stop = new AbortController();
    const onSignal = () => stop.abort();
    process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
    // `trackhook tail | head`: stop when the reader goes away; any other write failure (a full
    // disk) stops it as a failure.
    process.stdout.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code !== "EPIPE") fail(`cannot write the output: ${err.code ?? err.message}`);
      onSignal();
    });
    try {
      const messages = await tail(nc, { ...(source ? { namespace: source.namespace, source: source.name } : {}), ...(sinceMs !== undefined ? { sinceMs } : {}), signal: stop.signal }).catch((err: unknown) => {
        if (!isStreamNotFound(err)) throw err;
        // A new NATS, before any ingest ran (or --nats names another server): no stack trace.
        fail(noEventsStream(url));
        return undefined;
      });
      if (!messages) return;
      process.stderr.write(`tailing ${source ? `source ${source.namespace}/${source.name}` : "all sources"} (Ctrl-C to stop)\n`);
      // A typo'd source has nothing stored; an unreadable stream gets no hint.
      const stored = source ? await hasMessagesOn(await jetstreamManager(nc), EVENTS_STREAM, sourceSubjects(source.namespace, source.name)).catch(() => true) : true;
      if (source && !stored) {
        process.stderr.write(`no message of source ${source.namespace}/${source.name} is stored yet: is the name right? (\`kubectl get sources -A\`, or the Source documents of your --config)\n`);
      }
      for await (const m of messages) {
        if (!process.stdout.write(jsonLine(m))) {
          await once(process.stdout, "drain", { signal: stop.signal }).catch(() => {});
        }
      }
      // The messages end on their own only when NATS is gone for good (the client gave up
      // reconnecting): a watcher must not look as if it finished normally.
      if (!stop.signal.aborted) fail(`stopped: the connection to NATS at ${url} was lost`);
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      await nc.close();
    }
  },
};
