// DeletionRequest → one delete notification per user for each affected source that has an
// enabled webhook destination, exactly once. The plan (which sources) is written to status
// before anything is sent, and progress after each slice; a restart resumes from the recorded
// progress, and the few notifications sent after the last record carry the same Nats-Msg-Id
// again, so the stream drops them as duplicates.
import { resolveSourceNames } from "../../dataplane/config/mod.ts";
import { longestRetryMs, publishDeleteNotifications } from "../../dataplane/deletion/mod.ts";
import { purgeDeadLettersOf } from "../../dataplane/admin/mod.ts";
import type { DeletionRequestStatus, DeletionState } from "../../schema/mod.ts";
import type { ReconcileResult } from "../queue.ts";
import { readyOf, withReady, withStalled } from "../conditions.ts";
import { EVENTS_STREAM, isStreamNotFound } from "../../dataplane/nats/mod.ts";
import { apiErrorMessage, customResource, isNotFound } from "../kube/client.ts";
import { PLURALS, isDeleting, setReady, writeStatus, type DeletionResource, type DestinationResource, type OperatorContext } from "./context.ts";

type SourceProgress = NonNullable<DeletionRequestStatus["sources"]>[number];
const FINAL: readonly DeletionState[] = ["FINISHED", "FAILED"];
/** Progress is written at most this often while sending (each write is an API call). */
const PROGRESS_INTERVAL_MS = 500;
/**
 * A new request is planned this long after its creation at the earliest: a destination applied
 * in the same `kubectl apply` (or GitOps sync), after it, is then written too.
 */
const SETTLE_DELAY_MS = 3_000;
/** How long it then waits for the destinations it concerns to be reconciled (their consumers made), and how often it looks. */
const SETTLE_LIMIT_MS = 60_000;
const SETTLE_CHECK_MS = 1_000;
/** When this process first saw each request not yet planned (performance.now()), by uid; forgotten once planned. */
const firstSeen = new Map<string, number>();

function firstSeenAt(uid: string): number {
  const now = performance.now();
  // Requests deleted while waiting are never planned: their entries go once they are old.
  if (firstSeen.size > 10_000) for (const [key, at] of firstSeen) if (now - at > 10 * SETTLE_LIMIT_MS) firstSeen.delete(key);
  const seen = firstSeen.get(uid);
  if (seen !== undefined) return seen;
  firstSeen.set(uid, now);
  return now;
}

export async function reconcileDeletion(ctx: OperatorContext, namespace: string, name: string): Promise<ReconcileResult> {
  try {
    return await sendNotifications(ctx, namespace, name);
  } catch (err) {
    // Retried with backoff by the queue; meanwhile status says why it is not progressing.
    const request = await readFresh(ctx, namespace, name).catch(() => undefined);
    if (request && !isDeleting(request)) {
      // A publish no stream takes is answered "jetstream is not enabled" by nats.js: JetStream is
      // up, the events stream is not (found by a review: the message misled).
      const why = isStreamNotFound(err) || (err instanceof Error && err.name === "JetStreamNotEnabled")
        ? "stream TRACKHOOK_EVENTS does not exist yet (ingest creates it when it starts)"
        : apiErrorMessage(err);
      await setReady(ctx, request, { status: "Unknown", reason: "Retrying", message: `not done yet, retrying: ${why}` }).catch(() => {});
    }
    throw err;
  }
}

async function sendNotifications(ctx: OperatorContext, namespace: string, name: string): Promise<ReconcileResult> {
  // The cache may lag behind this process's own last status write; a resumed request must not
  // start from older progress than it recorded.
  let request = await readFresh(ctx, namespace, name);
  if (!request || isDeleting(request)) return;
  if (request.status?.state && FINAL.includes(request.status.state)) {
    if (await storeAgainIfLost(ctx, request)) return;
    return finalPurge(ctx, request);
  }

  if (!request.status?.sources) {
    const planned = await plan(ctx, request);
    if ("waitMs" in planned) return { requeueAfterMs: planned.waitMs };
    firstSeen.delete(request.metadata.uid ?? `${namespace}/${name}`);
    request = planned;
  }
  const progress = request.status!.sources!.map((s) => ({ ...s }));
  const status = (): DeletionRequestStatus => ({ ...request!.status, state: "RUNNING", sources: progress });
  let lastWrite = 0;
  for (const source of progress) {
    if (FINAL.includes(source.state)) continue;
    source.state = "RUNNING";
    const result = await publishDeleteNotifications(ctx.js, {
      namespace,
      source: source.name,
      requestId: request.metadata.uid,
      userIds: request.spec.userIds,
      timestamp: createdAt(request),
      from: source.notified,
      onProgress: async (stored) => {
        source.notified = stored;
        if (Date.now() - lastWrite < PROGRESS_INTERVAL_MS) return;
        lastWrite = Date.now();
        await writeStatus(ctx, request!, status());
        request = { ...request!, status: status() };
      },
    });
    ctx.metrics.notifications.inc({ outcome: "stored" }, result.stored);
    ctx.metrics.notifications.inc({ outcome: "duplicate" }, result.duplicates);
    source.state = "FINISHED";
    source.notified = new Set(request.spec.userIds).size; // users, each once (positions only matter while running)
    await writeStatus(ctx, request, status());
    request = { ...request, status: status() };
  }

  const failed = progress.filter((s) => s.state === "FAILED");
  const notified = progress.filter((s) => s.state === "FINISHED" && !s.reason).map((s) => s.name);
  const removed = await purgeDeadLetters(ctx, request);
  const purged = removed > 0 ? `; ${removed} of their dead letters removed` : "";
  const completedAt = new Date();
  // The stream they went to: a stream made since lost them (storeAgainIfLost).
  const notifiedOnStream = notified.length > 0 ? (await ctx.jsm.streams.info(EVENTS_STREAM)).created : undefined;
  const final = {
    state: failed.length > 0 ? "FAILED" : "FINISHED", sources: progress, completedAt: completedAt.toISOString(),
    deadLettersRemoved: removed, finalPurgeAt: new Date(completedAt.getTime() + (await longestRetryMs(ctx.jsm))).toISOString(),
    ...(notifiedOnStream ? { notifiedOnStream } : {}),
  } satisfies DeletionRequestStatus;
  const users = new Set(request.spec.userIds).size;
  // The request as last read or written, the final fields as the change: writeStatus compares the
  // two, and a request handed over with its final status already in it was never written (found
  // by a review: a status edited by hand stayed RUNNING at every resync).
  const failure = failed.length > 0 ? { reason: failed[0]!.reason ?? "Failed", message: failed.map((s) => `${s.name}: ${s.message}`).join("; ") } : undefined;
  // A request is done for good either way (its spec cannot change): a failed one is Stalled too,
  // so GitOps tools report it failed at once (found by a review: Flux waited to its timeout).
  request = { ...request, status: { ...request.status, conditions: withStalled(request.status?.conditions, failure, request.metadata.generation) } };
  await setReady(
    ctx,
    request,
    failure
      ? { status: "False", ...failure }
      : {
          status: "True",
          reason: "Finished",
          message: (notified.length > 0 ? `delete notifications for ${users} user${users === 1 ? "" : "s"} stored for ${notified.join(", ")}` : "no affected source has an enabled webhook destination; nothing to notify") + purged,
        },
    final,
  );
  ctx.log.info({ request: `${namespace}/${name}`, state: final.state, sources: notified, users, deadLettersRemoved: removed }, "deletion request done");
}

/**
 * Notices stored on an events stream that was lost since (nats-server's store lost, the stream
 * deleted) went with it, undelivered perhaps, while the request said FINISHED (found by a
 * disaster-recovery review: an erasure's record that was not true). While they would still be
 * retried (until finalPurgeAt), they are stored again on the stream there is now: a receiver that
 * had them already gets the same messageId again. The stream is told by its creation time,
 * recorded with the notices (notifiedOnStream): compared with completedAt instead, the operator's
 * clock against nats-server's, a skew stored them again for nothing or missed a loss (found by a
 * diff review). Looked at each time the finished request is reconciled (at every resync).
 * Returns whether it stored them again.
 */
async function storeAgainIfLost(ctx: OperatorContext, request: DeletionResource): Promise<boolean> {
  const status = request.status!;
  const notified = (status.sources ?? []).filter((s) => s.state === "FINISHED" && !s.reason);
  if (!status.notifiedOnStream || !status.finalPurgeAt || status.finalPurgeDone || notified.length === 0) return false;
  if (Date.parse(status.finalPurgeAt) <= Date.now()) return false;
  const stream = await ctx.jsm.streams.info(EVENTS_STREAM).catch((err: unknown) => {
    if (isStreamNotFound(err)) return undefined; // ingest makes it again; the next resync looks
    throw err;
  });
  if (!stream || stream.created === status.notifiedOnStream) return false;
  const { namespace, name } = request.metadata;
  for (const source of notified) {
    const result = await publishDeleteNotifications(ctx.js, {
      namespace, source: source.name, requestId: request.metadata.uid, userIds: request.spec.userIds, timestamp: createdAt(request), from: 0,
    });
    ctx.metrics.notifications.inc({ outcome: "stored" }, result.stored);
  }
  await writeStatus(ctx, request, { ...status, notifiedOnStream: stream.created });
  const message = `the events stream was made again (${stream.created}) after this request's delete notifications were stored, and they went with it: stored again for ${notified.map((s) => s.name).join(", ")}`;
  ctx.log.warn({ request: `${namespace}/${name}`, streamCreated: stream.created, sources: notified.map((s) => s.name) }, message);
  await ctx.events.record(request, "Warning", "NotificationsStoredAgain", message);
  return true;
}

/**
 * A message of the users still being retried when the request was made becomes a dead letter
 * only later (within its retry window, at most 90% of the events stream's max_age): once that
 * time has passed, the users' dead letters are looked for once more. Checked at each reconcile of
 * the finished request (the operator's resync comes every few minutes).
 */
async function finalPurge(ctx: OperatorContext, request: DeletionResource): Promise<ReconcileResult> {
  const status = request.status!;
  if (status.finalPurgeDone || !status.finalPurgeAt) return;
  const dueInMs = Date.parse(status.finalPurgeAt) - Date.now();
  if (dueInMs > 0) return { requeueAfterMs: Math.min(dueInMs, 60 * 60_000) };
  const { namespace } = request.metadata;
  const removed = await purgeDeadLetters(ctx, request);
  await writeStatus(ctx, request, { ...status, deadLettersRemoved: (status.deadLettersRemoved ?? 0) + removed, finalPurgeDone: true });
  if (removed > 0) ctx.log.info({ request: `${namespace}/${request.metadata.name}`, deadLettersRemoved: removed }, "deletion request: dead letters made after it removed");
}

/**
 * trackhook's own copies that `replay` could send again: the users' dead letters, of every source
 * the request names (a deleted one's, and one's without an enabled destination, too), or of the
 * whole namespace when it names none. Resolves with how many were removed.
 */
async function purgeDeadLetters(ctx: OperatorContext, request: DeletionResource): Promise<number> {
  const { sources, userIds } = request.spec;
  return (await purgeDeadLettersOf(ctx.js, ctx.jsm, { namespace: request.metadata.namespace, ...(sources ? { sources } : {}), userIds })).removed;
}


/**
 * Decides once which sources get notifications, and records it before anything is sent. Waits
 * (a few seconds, then while a destination it concerns is not reconciled yet): a destination
 * enabled again in the same apply as the request gets its consumer (starting from then) only when
 * reconciled, and a notification stored before that would never reach it, though the request
 * said it was sent (found by a review: a GitOps sync re-enabling a destination lost its erasure
 * notice).
 */
async function plan(ctx: OperatorContext, request: DeletionResource): Promise<DeletionResource | { waitMs: number }> {
  // Timed from when this process first saw it, by its own monotonic clock: creationTimestamp is
  // the API server's, and an operator whose clock ran a minute ahead skipped the wait (found by a
  // time review). An operator that starts anew waits again, a few seconds.
  const waitedMs = performance.now() - firstSeenAt(request.metadata.uid ?? `${request.metadata.namespace}/${request.metadata.name}`);
  if (waitedMs < SETTLE_DELAY_MS) return { waitMs: SETTLE_DELAY_MS - waitedMs };
  const { namespace } = request.metadata;
  const namespaceSources = ctx.sources.list(namespace);
  // Each source once, however often the request names it (its notifications are deduplicated anyway).
  const names = request.spec.sources ? [...new Set(request.spec.sources)] : namespaceSources.filter((s) => !isDeleting(s)).map((s) => s.metadata.name).sort();
  // From the resources, not the bucket: a destination applied together with the request may not
  // be reconciled yet, and the plan is final.
  const inNamespace = namespaceSources.map((s) => ({ name: s.metadata.name, labels: s.metadata.labels }));
  // From the API server: the cache may not have the destinations written with the request yet.
  const listed = (await ctx.kube.custom.listNamespacedCustomObject({ ...customResource(PLURALS.WebhookDestination), namespace })) as { items: DestinationResource[] };
  const enabled = listed.items
    .filter((d) => !isDeleting(d) && d.spec.enabled !== false)
    .map((d) => ({ resource: d, sources: resolveSourceNames(d.spec, inNamespace).filter((s) => names.includes(s)) }))
    .filter((d) => d.sources.length > 0);
  const unsettled = enabled.filter(({ resource: d }) => d.status?.observedGeneration !== d.metadata.generation || readyOf(d.status?.conditions)?.status === "Unknown");
  if (unsettled.length > 0 && waitedMs < SETTLE_LIMIT_MS) {
    const waitingFor = unsettled.map((d) => d.resource.metadata.name).sort().join(", ");
    await setReady(ctx, request, { status: "Unknown", reason: "WaitingForDestinations", message: `waiting for WebhookDestination ${waitingFor} to be reconciled before anything is sent` });
    return { waitMs: SETTLE_CHECK_MS };
  }
  const destinationsOf = (source: string) => enabled.filter((d) => d.sources.includes(source)).map((d) => d.resource.metadata.name).sort();
  const sources: SourceProgress[] = names.map((name) => {
    if (!ctx.sources.get(namespace, name)) {
      return { name, state: "FAILED", notified: 0, reason: "SourceNotFound", message: `no Source "${name}" in namespace ${namespace}` };
    }
    const destinations = destinationsOf(name);
    if (destinations.length === 0) {
      return { name, state: "FINISHED", notified: 0, reason: "NoEnabledDestination", message: "no enabled WebhookDestination receives this source: nothing to notify" };
    }
    return { name, state: "INITIALIZED", notified: 0, destinations };
  });
  const generation = request.metadata.generation;
  const users = new Set(request.spec.userIds).size;
  const message = `sending delete notifications for ${users} user${users === 1 ? "" : "s"}`;
  const status: DeletionRequestStatus = {
    ...request.status,
    state: "RUNNING",
    sources,
    startedAt: new Date().toISOString(),
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
    conditions: withReady(request.status?.conditions, { status: "Unknown", reason: "Running", message }, generation),
  };
  await writeStatus(ctx, request, status);
  await ctx.events.record(request, "Normal", "Running", message);
  return { ...request, status };
}

/** The object as the API server has it now: status decides what was already sent. */
async function readFresh(ctx: OperatorContext, namespace: string, name: string): Promise<DeletionResource | undefined> {
  try {
    return (await ctx.kube.custom.getNamespacedCustomObject({ ...customResource(PLURALS.DeletionRequest), namespace, name })) as DeletionResource;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

function createdAt(request: DeletionResource): string {
  const created = request.metadata.creationTimestamp;
  return created ? new Date(created).toISOString() : new Date().toISOString();
}
