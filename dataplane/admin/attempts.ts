// `trackhook attempts`: a destination's attempt records, oldest first.
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { ATTEMPTS_STREAM, attemptsSubject, readStored, streamLastSeq } from "../nats/mod.ts";
import type { AttemptRecord } from "../delivery/mod.ts";
import { checkDestinationRef, type DestinationRef } from "./names.ts";

export interface AttemptsOptions extends DestinationRef {
  /** Only the attempts of this message. */
  messageId?: string;
  /** Only attempts recorded within this many milliseconds. */
  sinceMs?: number;
  /** At most this many records, oldest first. */
  limit?: number;
}

/** The attempt records of a destination, oldest first (TRACKHOOK_ATTEMPTS keeps 7 days). */
export async function* readAttempts(nc: NatsConnection, options: AttemptsOptions): AsyncGenerator<AttemptRecord> {
  checkDestinationRef(options);
  if ((await streamLastSeq(await jetstreamManager(nc), ATTEMPTS_STREAM)) === undefined) return;
  const startTime = options.sinceMs !== undefined ? new Date(Date.now() - options.sinceMs) : undefined;
  let left = options.limit ?? Number.POSITIVE_INFINITY;
  if (left <= 0) return;
  for await (const m of readStored(jetstream(nc), ATTEMPTS_STREAM, attemptsSubject(options.namespace, options.destination), startTime ? { startTime } : {})) {
    for (const record of attemptRecordsIn(m.string())) {
      if (options.messageId !== undefined && record.messageId !== options.messageId) continue;
      yield record;
      if (--left === 0) return;
    }
  }
}

/**
 * The records of one TRACKHOOK_ATTEMPTS message: one JSON record per line (a worker publishes a
 * turn's records together; before 0.3 every message held one). Lines that are not a record (not
 * written by a worker) are passed over.
 */
export function attemptRecordsIn(text: string): AttemptRecord[] {
  const records: AttemptRecord[] = [];
  for (const line of text.split("\n")) {
    try {
      const record: unknown = JSON.parse(line);
      if (record !== null && typeof record === "object" && !Array.isArray(record)) records.push(record as AttemptRecord);
    } catch {
      // not JSON
    }
  }
  return records;
}
