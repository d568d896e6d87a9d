// JetStream API calls made at a process's start, tried again while JetStream is slow to answer.
//
// In a NATS cluster just formed, or electing a leader, creating an R3 stream may take longer than
// the client's API timeout (5 s). A process that exited on that went into a crash loop on a fresh
// install, each restart a little later (Kubernetes' back-off), though the next try would have done.

import { errorChain } from "./failures.ts";

/** How long start-up calls are tried again for, before the error is the process's. */
export const START_PATIENCE_MS = 60_000;

/** A request with no answer in time, or none yet from a JetStream that is starting or electing. */
export function isSlowJetStream(err: unknown): boolean {
  return errorChain(err).some((e) =>
    // "No responders": JetStream not up yet after a restart (nats.js wraps it in JetStreamNotEnabled).
    e.name === "TimeoutError" || e.name === "NoResponders"
    // "JetStream system temporarily unavailable": a cluster without a meta leader.
    || (e.name === "JetStreamApiError" && (e as Error & { code?: unknown }).code === 10008));
}

const NO_ANSWER = "JetStream did not answer in time (in a NATS cluster, a leader election or a new replicated stream takes a few seconds)";
// Said apart: a server without -js answers the same way for ever (found by a CLI review: waited a
// minute saying "did not answer in time", then printed a stack trace).
const NO_RESPONDERS = "JetStream does not answer (a server just restarted is still starting it; one run without -js, or a jetstream {} block, never will)";

/** `call()`, tried again every 2 s while JetStream is slow (once said in the log), for up to `patienceMs`. */
export async function patiently<T>(what: string, call: () => Promise<T>, log: { warn(fields: object, msg: string): void }, patienceMs = START_PATIENCE_MS): Promise<T> {
  const giveUpAt = Date.now() + patienceMs;
  for (let tries = 1; ; tries++) {
    try {
      return await call();
    } catch (err) {
      if (!isSlowJetStream(err) || Date.now() >= giveUpAt) throw err;
      if (tries === 1) log.warn({ err: (err as Error).message, givingUpInMs: giveUpAt - Date.now() }, `${what}: ${errorChain(err).some((e) => e.name === "NoResponders") ? NO_RESPONDERS : NO_ANSWER}; trying again`);
      await new Promise((r) => setTimeout(r, 2_000));
    }
  }
}
