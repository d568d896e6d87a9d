// WebhookDestination → `destination.<ns>.<name>` in the config bucket (secrets resolved, selector
// resolved) and its durable consumer on TRACKHOOK_EVENTS. While it cannot compile (a Secret
// missing, say), the last good config and its consumer stay: messages keep flowing and nothing
// already accepted is lost; Ready says what is wrong.
import { compileDestination, destinationKey, secretNamesOf } from "../../dataplane/config/mod.ts";
import { deadLetterUndelivered, ensureDestinationConsumer, removeDestinationConsumers, type SourcesRemoved, type UndeliveredMoved } from "../../dataplane/delivery/mod.ts";
import { consumerName, isStreamNotFound, sourceOfEventSubject } from "../../dataplane/nats/mod.ts";
import { KeyedLogInterval } from "../../dataplane/telemetry/mod.ts";
import type { WebhookDestinationDocument } from "../../schema/mod.ts";
import { readyOf } from "../conditions.ts";
import type { ReconcileResult } from "../queue.ts";
import { addFinalizer, isDeleting, readSecrets, removeFinalizer, reportingFailures, setReady, unsetField, type DestinationResource, type OperatorContext } from "./context.ts";

const STREAM_RETRY_MS = 5_000;

export async function reconcileDestination(ctx: OperatorContext, namespace: string, name: string): Promise<ReconcileResult> {
  return reportingFailures(ctx, () => ctx.statusWrites.fresh(ctx.destinations.get(namespace, name)), () => applyDestination(ctx, namespace, name));
}

async function applyDestination(ctx: OperatorContext, namespace: string, name: string): Promise<ReconcileResult> {
  const destination = ctx.statusWrites.fresh(ctx.destinations.get(namespace, name));
  const key = destinationKey(namespace, name);
  if (!destination || isDeleting(destination)) {
    // Config first: delivery pods stop their worker, then the consumer (and its backlog) goes.
    const configDeleted = await ctx.config.delete(key);
    const consumersDeleted = await removeConsumer(ctx, namespace, name, "destination_deleted", destination);
    // Said once: the DELETED event after the finalizer's removal runs this again, to find nothing.
    if (configDeleted || consumersDeleted > 0) ctx.log.info({ destination: `${namespace}/${name}` }, "destination removed: config and consumer deleted");
    if (destination) await removeFinalizer(ctx, destination);
    return;
  }
  await addFinalizer(ctx, destination);

  // Since when it has been enabled without a break, in its config too: its consumer made again
  // meanwhile starts at the stream's beginning when the stream is younger (ensureDestinationConsumer).
  const deliveringSince = destination.spec.enabled === false ? undefined : (destination.status?.deliveringSince ?? new Date().toISOString());
  const doc = { ...destination, status: { ...destination.status, deliveringSince } } as unknown as WebhookDestinationDocument;
  const sources = ctx.sources
    .list(namespace)
    .filter((s) => !isDeleting(s))
    .map((s) => ({ name: s.metadata.name, labels: s.metadata.labels }));
  const result = compileDestination(namespace, doc, sources, await readSecrets(ctx, namespace, secretNamesOf(doc)), {
    origin: "operator",
    refusePrivateNetworks: !ctx.allowPrivateNetworks,
  });
  const urlCount = destination.spec.urls.length;
  if (!result.ok) {
    const kept = (await ctx.config.get(key)) as { enabled?: boolean } | undefined;
    const message = result.problems.map((p) => `${p.field}: ${p.message}`).join("; ");
    const inEffect = kept === undefined ? "" : kept.enabled === false ? " (the last good config, disabled, stays in effect)" : " (the last good config is still delivering)";
    await setReady(ctx, destination, { status: "False", reason: result.problems[0]!.reason, message: `${message}${inEffect}` }, { urlCount });
    return;
  }
  const compiled = result.value;
  if (await ctx.config.put(key, compiled)) ctx.log.info({ destination: `${namespace}/${name}`, sources: compiled.sources }, "destination config written");
  let notMoved: Extract<SourcesRemoved, { error: Error }> | undefined;
  try {
    if (compiled.enabled) {
      await ensureDestinationConsumer(ctx.jsm, compiled, {
        dropUndelivered: destination.metadata.annotations?.[DROP_UNDELIVERED] === "true",
        log: ctx.log,
        onSourcesRemoved: (removed) => {
          if ("moved" in removed) void saidMoved(ctx, namespace, name, "source_removed", removed.moved, destination, removed.filters).catch(() => {});
          else notMoved = removed;
        },
      });
    } else await removeConsumer(ctx, namespace, name, "destination_disabled", destination);
  } catch (err) {
    if (!isStreamNotFound(err)) throw err;
    // deliveringSince kept, as in the config just written: made anew at each retry, it rewrote
    // the config every 5 s for as long as the stream was missing (found by a review).
    await setReady(ctx, destination, {
      status: "False",
      reason: "StreamNotFound",
      message: "stream TRACKHOOK_EVENTS does not exist yet (ingest creates it when it starts)",
    }, { urlCount, sources: compiled.sources, ...(deliveringSince ? { deliveringSince } : {}) });
    return { requeueAfterMs: STREAM_RETRY_MS };
  }
  const message = !compiled.enabled
    ? "disabled: nothing is delivered"
    : compiled.sources.length === 0
      ? "delivering, but the selector matches no Source yet"
      : `delivering messages of ${compiled.sources.join(", ")} to ${urlCount} URL${urlCount === 1 ? "" : "s"}`;
  // From now on, a consumer made again (enabled again) starts from when it is made (compileDestination).
  const inEffectSince = destination.status?.inEffectSince ?? new Date().toISOString();
  // A listed source that takes no messages sends it nothing: said, for a Source renamed in Git
  // keeps its key under the old name until that one is gone (found by a GitOps review: 200s,
  // nothing delivered, and this destination said all was well). A Source switched off on
  // purpose is said, but is no fault to alert on.
  const idle = compiled.enabled ? sourcesNotAccepting(ctx, namespace, compiled.sources) : [];
  if (idle.length > 0) ctx.log.debug({ destination: `${namespace}/${name}`, idle }, "sources that take no messages");
  const faulty = idle.some(({ why }) => why !== "disabled");
  const note = idle.map(({ name, why }) => `; Source ${name} accepts no messages (${why})`).join("");
  const stillRead = notMoved ? `; ${await saidNotMoved(ctx, destination, notMoved)}` : "";
  await setReady(
    ctx, destination, { status: "True", reason: faulty ? "SourceNotAccepting" : "Reconciled", message: message + note + stillRead },
    // Cleared (null, in a merge patch) while disabled: enabled again, it starts from then.
    { urlCount, sources: compiled.sources, inEffectSince, ...(deliveringSince ? { deliveringSince } : unsetField(destination.status, "deliveringSince")) }, faulty,
  );
  // Tried again until the DLQ takes them (or the annotation lets them go).
  if (notMoved && !notMoved.narrowed) return { requeueAfterMs: NOT_MOVED_RETRY_MS };
}

const NOT_MOVED_RETRY_MS = 60_000;

/**
 * Sources left the destination's filter but their undelivered delete notifications could not be
 * moved to the DLQ (full): the filter stays as it was (they are still read and delivered) until
 * there is room, or the annotation drops them. Said in a Warning event (once per 10 minutes) and
 * the log; returns the Ready message's part.
 */
async function saidNotMoved(ctx: OperatorContext, destination: DestinationResource, removed: Extract<SourcesRemoved, { error: Error }>): Promise<string> {
  const label = `${destination.metadata.namespace}/${destination.metadata.name}`;
  // A source's filter (`trackhook.events.<ns>.<source>.>`) reads as one of its subjects.
  const sources = removed.filters.map((f) => sourceOfEventSubject(f) ?? f).join(", ");
  if (removed.narrowed) {
    ctx.log.error({ destination: label, sources, err: removed.error.message }, `the undelivered delete notifications of the sources that left spec.sources could not be moved to the dead-letter queue and are dropped, as ${DROP_UNDELIVERED} asks`);
    return `the undelivered delete notifications of ${sources} were dropped (${DROP_UNDELIVERED})`;
  }
  const message = `Source(s) ${sources} left spec.sources but are still read (and delivered): their undelivered delete notifications could not be moved to the dead-letter queue (${removed.error.message}); tried again every minute: make room in TRACKHOOK_DLQ, or annotate it ${DROP_UNDELIVERED}=true to drop them`;
  ctx.log.error({ destination: label }, message);
  if (notMovedSaid.pass(destination.metadata.uid) !== undefined) await ctx.events.record(destination, "Warning", "UndeliveredNotMoved", message).catch(() => {});
  return message;
}


/** Of these sources, those ingest refuses messages for: disabled, or not Ready (a missing Secret, a key another Source holds). */
function sourcesNotAccepting(ctx: OperatorContext, namespace: string, names: string[]): Array<{ name: string; why: string }> {
  return names.flatMap((name) => {
    const source = ctx.sources.get(namespace, name);
    if (!source) return [{ name, why: "no such Source in the namespace" }];
    if (isDeleting(source)) return [{ name, why: "being deleted" }];
    if (source.spec.enabled === false) return [{ name, why: "disabled" }];
    const ready = readyOf(source.status?.conditions);
    return ready?.status === "False" ? [{ name, why: ready.reason }] : [];
  });
}

/** Annotation that lets a destination go when its undelivered delete notifications cannot be dead-lettered. */
export const DROP_UNDELIVERED = "trackhook.io/drop-undelivered";
/** Once per destination every 10 minutes: the reconcile is retried every minute meanwhile. */
const notMovedSaid = new KeyedLogInterval(10 * 60_000);

/**
 * Removes a destination's consumer, its delete notifications and replayed dead letters not yet
 * delivered moved to the dead-letter queue first (deadLetterUndelivered), said at error level, in
 * a Warning event and in the operator's metric (the alert TrackhookDeleteNotificationDestinationRemoved).
 * Resolves with how many consumers were removed (0 or 1).
 */
export async function removeConsumer(
  ctx: OperatorContext,
  namespace: string,
  name: string,
  reason: "destination_disabled" | "destination_deleted",
  destination?: DestinationResource,
): Promise<number> {
  await moveUndelivered(ctx, namespace, name, reason, destination);
  return removeDestinationConsumers(ctx.jsm, [consumerName(namespace, name)]);
}

async function moveUndelivered(
  ctx: OperatorContext,
  namespace: string,
  name: string,
  reason: "destination_disabled" | "destination_deleted",
  destination: DestinationResource | undefined,
): Promise<void> {
  let moved;
  try {
    moved = await deadLetterUndelivered(ctx.jsm, ctx.js, consumerName(namespace, name), reason);
  } catch (err) {
    const label = `${namespace}/${name}`;
    // The way out when the DLQ cannot take them (full) and the destination must go anyway.
    if (destination?.metadata.annotations?.[DROP_UNDELIVERED] === "true") {
      ctx.log.error({ destination: label, err: (err as Error).message }, `its undelivered delete notifications could not be moved to the dead-letter queue and are dropped, as ${DROP_UNDELIVERED} asks`);
      return;
    }
    // Retried (the consumer and its messages stay meanwhile): said where kubectl shows it, a
    // deleting object too, whose status is not written (found by a review: a delete hung, silent).
    const message = `its undelivered delete notifications could not be moved to the dead-letter queue (${(err as Error).message}), so it is not ${reason === "destination_deleted" ? "removed" : "disabled"} yet: make room in TRACKHOOK_DLQ (\`trackhook dead-letters\`, \`nats stream purge\`), or annotate it ${DROP_UNDELIVERED}=true to drop them`;
    if (destination && notMovedSaid.pass(destination.metadata.uid) !== undefined) {
      await ctx.events.record(destination, "Warning", "UndeliveredNotMoved", message).catch(() => {});
    }
    ctx.log.error({ destination: label }, message);
    throw err;
  }
  await saidMoved(ctx, namespace, name, reason, moved, destination);
}

/** Says what deadLetterUndelivered moved: log (error), metric, and a Warning event on the destination. */
async function saidMoved(
  ctx: OperatorContext,
  namespace: string,
  name: string,
  reason: "destination_disabled" | "destination_deleted" | "source_removed",
  moved: UndeliveredMoved,
  destination: DestinationResource | undefined,
  filters?: string[],
): Promise<void> {
  if (moved.deletes + moved.replayed === 0) return;
  ctx.metrics.notifications.inc({ outcome: "dead_lettered" }, moved.deletes);
  const label = `${namespace}/${name}`;
  const message = reason === "source_removed"
    ? `${moved.deletes} delete notification(s) (user erasures) of the source(s) no longer in spec.sources were not yet delivered and were moved to the dead-letter queue (source_removed): \`trackhook dead-letters --destination ${label}\`, and \`trackhook replay\` to send them`
    : `${moved.deletes} delete notification(s) (user erasures) and ${moved.replayed} replayed message(s) not yet delivered were moved to the dead-letter queue (${reason}): \`trackhook dead-letters --destination ${label}\`, and \`trackhook replay\` once it is enabled again`;
  ctx.log.error({ destination: label, deleteNotifications: moved.deletes, replayed: moved.replayed, reason, ...(filters ? { filters } : {}) }, message);
  if (destination) await ctx.events.record(destination, "Warning", "UndeliveredDeadLettered", message);
}

