// `trackhook tail`: the messages stored from now on (or from a while ago), as they arrive.
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { StoredMessage } from "../../schema/mod.ts";
import { DEFAULT_NAMESPACE } from "../config/mod.ts";
import { parseJson } from "../json.ts";
import { EVENTS_STREAM, EVENTS_SUBJECTS, followStream, namespaceSubjects, sourceSubjects } from "../nats/mod.ts";
import { checkName } from "./names.ts";

export interface TailOptions {
  /** Only this namespace's messages (`default` when only `source` is given). */
  namespace?: string;
  /** Only this source's messages. */
  source?: string;
  /** Start with the messages stored within this long before now, instead of only new ones. */
  sinceMs?: number;
  signal: AbortSignal;
}

export interface TailedMessage {
  subject: string;
  seq: number;
  /** When the stream stored it. */
  time: string;
  message: StoredMessage;
}

/** The subject filter of `tail`. */
export function tailFilter(options: { namespace?: string; source?: string }): string {
  if (options.source !== undefined) {
    const namespace = options.namespace ?? DEFAULT_NAMESPACE;
    checkName("namespace", namespace);
    checkName("source", options.source);
    return sourceSubjects(namespace, options.source);
  }
  if (options.namespace !== undefined) {
    checkName("namespace", options.namespace);
    return namespaceSubjects(options.namespace);
  }
  return EVENTS_SUBJECTS;
}

/**
 * Messages stored in TRACKHOOK_EVENTS from the moment this resolves, until `signal` fires (or the
 * caller stops iterating). It resolves once the ordered consumer exists, so anything published
 * after that is seen.
 */
export async function tail(nc: NatsConnection, options: TailOptions): Promise<AsyncIterable<TailedMessage>> {
  const messages = await followStream(jetstream(nc), EVENTS_STREAM, tailFilter(options), options);
  return (async function* () {
    for await (const m of messages) {
      let message: StoredMessage;
      try {
        message = parseJson(m.string()) as StoredMessage;
      } catch {
        continue;
      }
      yield { subject: m.subject, seq: m.seq, time: new Date(m.info.timestampNanos / 1e6).toISOString(), message };
    }
  })();
}
