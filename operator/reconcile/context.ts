// What every reconciler works with, and the API writes they share: status, finalizers, Secrets.
import { isDeepStrictEqual } from "node:util";
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { RefusedSecret, secretValues, type ConfigWriter, type SecretLookup } from "../../dataplane/config/mod.ts";
import type { Logger } from "../../dataplane/logging.ts";
import { KeyedLogInterval } from "../../dataplane/telemetry/mod.ts";
import type {
  CompiledSource,
  DeletionRequestSpec,
  DeletionRequestStatus,
  SourceSpec,
  SourceStatus,
  WebhookDestinationSpec,
  WebhookDestinationStatus,
} from "../../schema/mod.ts";
import { KINDS } from "../../schema/mod.ts";
import type { EventRecorder } from "../events.ts";
import type { OperatorMetrics } from "../metrics.ts";
import { MERGE_PATCH, apiErrorMessage, apiStatus, customResource, isConflict, isNotFound, type CustomResource, type Kube, type KubeObject } from "../kube/client.ts";
import { readMetadata } from "../kube/metadata.ts";
import type { ObjectCache } from "../kube/reflector.ts";
import type { ReconcileResult } from "../queue.ts";
import { readyOf, withReady, type ReadyState } from "../conditions.ts";
import type { DeliveryHealth } from "../delivery-health.ts";

/** Who wrote status and finalizers, as managedFields show it (client-node's default names any of its users). */
const FIELD_MANAGER = "trackhook-operator";

export type SourceResource = CustomResource<SourceSpec, SourceStatus> & { kind: "Source" };
export type DestinationResource = CustomResource<WebhookDestinationSpec, WebhookDestinationStatus> & { kind: "WebhookDestination" };
export type DeletionResource = CustomResource<DeletionRequestSpec, DeletionRequestStatus> & { kind: "DeletionRequest" };

/** Removed only after the object's KV entries (and consumer) are gone. */
export const FINALIZER = "trackhook.io/cleanup";

/** Each kind's resource name, as its CRD has it (schema/crds.ts). */
export const PLURALS = Object.fromEntries(KINDS.map((k) => [k.kind, k.plural])) as Record<"Source" | "WebhookDestination" | "DeletionRequest", string>;
type Kind = keyof typeof PLURALS;

/** A compiled Source's write keys, as digests. */
export type SourceKeys = Pick<CompiledSource, "writeKeySha256" | "additionalWriteKeys" | "reservedWriteKeys">;

export interface OperatorContext {
  kube: Kube;
  log: Logger;
  events: EventRecorder;
  metrics: OperatorMetrics;
  config: ConfigWriter;
  jsm: JetStreamManager;
  js: JetStreamClient;
  sources: ObjectCache<SourceResource>;
  destinations: ObjectCache<DestinationResource>;
  deletions: ObjectCache<DeletionResource>;
  /** Secrets' metadata (names, labels), never their values; stale in a namespace while its watch fails. */
  secrets: ObjectCache<KubeObject> & { failing(namespace: string): boolean };
  /** Whether a namespace is watched: a Source elsewhere may hold a key, unseen (a namespace-scoped operator). */
  inScope(namespace: string): boolean;
  /** namespace/name → the write-key digests of the Sources in effect, to refuse a key two Sources share. */
  sourceDigests: Map<string, SourceKeys>;
  /** Whether delivery may reach private networks: if not, destinations whose URLs only reach them are refused. */
  allowPrivateNetworks: boolean;
  /** Read only Secrets labelled SECRET_LABEL: who may create a WebhookDestination may not send any Secret of its namespace to a URL. */
  requireSecretLabel: boolean;
  /** Status written and not yet seen back through the watch. */
  statusWrites: StatusWrites;
  /** A WebhookDestination's Delivering condition as last found, written with every status write (delivery-health.ts). */
  deliveryHealth: Pick<DeliveryHealth, "conditions">;
  /** Queues another reconcile of an object (a Source that lost or may win a shared key). */
  requeue(kind: Kind, namespace: string, name: string): void;
}

type AnyResource = SourceResource | DestinationResource | DeletionResource;

/**
 * Status this operator wrote that the watch has not brought back yet, by uid. Until then a re-run
 * must compare with what was written: an event from just before the write (the finalizer added a
 * moment earlier, on create) replaces the cached copy with one without it, and the same status
 * would be written twice.
 */
export class StatusWrites {
  readonly #pending = new Map<string, { resourceVersion: string | undefined; status: unknown; at: number }>();

  /** The status the server holds as far as this operator knows. */
  current(object: AnyResource): unknown {
    return this.#pendingFor(object)?.status ?? object.status ?? {};
  }

  /**
   * The cached object with the status last written, if the cache has not caught up with it: a
   * reconcile builds its status from this (a destination's inEffectSince, Ready's
   * lastTransitionTime), so a re-run on a stale copy neither writes again nor moves them.
   */
  fresh<R extends AnyResource>(object: R | undefined): R | undefined {
    if (!object) return undefined;
    // Always a copy: a status write records itself on the object it was given (writeStatus),
    // and on the cached one the watch event of that write then had no change to show. A Source's
    // Ready flip went unseen, and its destinations kept saying it took no messages (a CI flake).
    const pending = this.#pendingFor(object);
    return { ...object, status: pending ? pending.status : object.status } as R;
  }

  #pendingFor(object: AnyResource): { status: unknown } | undefined {
    const { uid, resourceVersion } = object.metadata;
    const pending = this.#pending.get(uid);
    if (!pending) return undefined;
    // Caught up (or the event was missed: a relist after a lost watch takes at most this long).
    if (resourceVersion === pending.resourceVersion || Date.now() - pending.at > PENDING_STATUS_MS) {
      this.#pending.delete(uid);
      return undefined;
    }
    return pending;
  }

  wrote(object: AnyResource, resourceVersion: string | undefined, status: unknown): void {
    const now = Date.now();
    for (const [uid, p] of this.#pending) if (now - p.at > PENDING_STATUS_MS) this.#pending.delete(uid);
    this.#pending.set(object.metadata.uid, { resourceVersion, status, at: now });
  }
}

const PENDING_STATUS_MS = 60_000;

/**
 * Equal as JSON, whatever the order of keys: the API server returns status with its keys sorted,
 * so a string comparison saw every status it had read back (after a restart or failover: all of
 * them) as changed.
 */
function sameJson(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(JSON.parse(JSON.stringify(a ?? {})), JSON.parse(JSON.stringify(b ?? {})));
}

/**
 * Writes status with a merge patch on the status subresource, only when it changes (a write
 * is an update event for every watcher). Returns the Ready condition before the write.
 */
export async function writeStatus<R extends AnyResource>(ctx: OperatorContext, object: R, status: NonNullable<R["status"]>): Promise<void> {
  if (sameJson(ctx.statusWrites.current(object), status)) return;
  const { name, namespace } = object.metadata;
  try {
    const written = (await ctx.kube.custom.patchNamespacedCustomObjectStatus(
      { ...customResource(PLURALS[object.kind]), namespace, name, body: { status }, fieldManager: FIELD_MANAGER },
      MERGE_PATCH,
    )) as { metadata?: { resourceVersion?: string } } | undefined;
    (object as { status?: unknown }).status = status;
    ctx.statusWrites.wrote(object, written?.metadata?.resourceVersion, status);
  } catch (err) {
    if (!isNotFound(err)) throw err; // deleted meanwhile: nothing to report on
  }
}

/** A status write that failed is told in an Event once per object every 10 minutes: the reconcile is retried every minute meanwhile. */
const statusFailuresSaid = new KeyedLogInterval(10 * 60_000);

/**
 * A status field removed by the merge patch (set to null), only when the object has it: a null
 * written every time would make every status differ from the last, and be written again.
 */
export function unsetField<K extends string>(status: object | undefined, field: K): { [P in K]?: never } {
  return status !== undefined && (status as Record<string, unknown>)[field] != null ? ({ [field]: null } as never) : {};
}

/** Status with Ready set, plus an Event when Ready's status or reason changed. */
export async function setReady<R extends AnyResource>(
  ctx: OperatorContext,
  object: R,
  state: ReadyState,
  extra: Omit<NonNullable<R["status"]>, "conditions" | "observedGeneration"> = {} as never,
  /** Also a Warning event when Ready is not False (a retry is worth a look). */
  warning = false,
): Promise<void> {
  const before = readyOf(object.status?.conditions);
  const generation = object.metadata.generation;
  const status = {
    ...(object.status ?? {}),
    ...extra,
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
    conditions: ctx.deliveryHealth.conditions(object, withReady(object.status?.conditions, state, generation)),
  } as NonNullable<R["status"]>;
  try {
    await writeStatus(ctx, object, status);
  } catch (err) {
    // A status the API server refuses (RBAC without */status, a webhook) would leave the object
    // showing nothing, or an old Ready: an Event may still be allowed, and says what was meant
    // (found by a review: new Sources had no status for minutes, and nothing said why).
    if (statusFailuresSaid.pass(object.metadata.uid) !== undefined) {
      await ctx.events.record(object as AnyResource & { kind: Kind }, "Warning", "StatusWriteFailed", `Ready=${state.status} ${state.reason} (${state.message}) could not be written to status: ${apiErrorMessage(err)}`).catch(() => {});
    }
    throw err;
  }
  if (before?.status !== state.status || before?.reason !== state.reason) {
    const type = warning || state.status === "False" ? "Warning" : "Normal";
    // Said in the operator's log too: whoever reads logs, not Events, learns of it.
    const { namespace, name } = object.metadata;
    const line = { kind: object.kind, resource: `${namespace}/${name}`, ready: state.status, reason: state.reason, detail: state.message, was: before ? `${before.status} ${before.reason}` : undefined };
    if (type === "Warning") ctx.log.warn(line, state.status === "True" ? "resource ready, with a warning" : "resource not ready");
    else ctx.log.info(line, "resource ready");
    await ctx.events.record(object as AnyResource & { kind: Kind }, type, state.reason, state.message);
  }
}

/**
 * Runs a reconcile. One that throws (NATS or the API server unreachable, say) is retried with
 * backoff by the queue; meanwhile Ready says so (Unknown, Retrying, with a Warning event) instead
 * of still showing the last success.
 */
/**
 * What failed, for a Retrying message: the Kubernetes API's errors carry their HTTP status; the
 * others come from NATS (the config bucket, a consumer, a stream), and "timeout" alone did not say
 * which (found by a review).
 */
function failureOf(err: unknown): string {
  if (apiStatus(err) !== undefined) return `the Kubernetes API: ${apiErrorMessage(err)}`;
  if (err instanceof Error && NATS_ERRORS.test(err.name)) return `NATS (the config bucket or the events stream): ${err.message}`;
  return apiErrorMessage(err);
}

/** nats.js's error classes (TimeoutError, NoRespondersError, JetStreamApiError, ...). */
const NATS_ERRORS = /^(Timeout|NoResponders|Request|Connection|ClosedConnection|DrainingConnection|PermissionViolation|Authorization|Protocol|JetStream\w*|StreamNotFound|ConsumerNotFound)Error$/;

export async function reportingFailures(ctx: OperatorContext, object: () => AnyResource | undefined, reconcile: () => Promise<ReconcileResult>): Promise<ReconcileResult> {
  try {
    return await reconcile();
  } catch (err) {
    const current = object();
    // A conflict is a lost race with another write (the finalizer's, say): the retry is routine.
    if (current && !isDeleting(current) && !isConflict(err)) {
      await setReady(ctx, current, { status: "Unknown", reason: "Retrying", message: `the spec could not be applied yet, retrying: ${failureOf(err)}` }, {}, true).catch(() => {});
    }
    throw err;
  }
}

async function patchFinalizers(ctx: OperatorContext, object: AnyResource, finalizers: string[]): Promise<void> {
  const { name, namespace, resourceVersion } = object.metadata;
  // resourceVersion makes this a compare-and-swap: a concurrent change fails with 409 and retries.
  await ctx.kube.custom.patchNamespacedCustomObject(
    { ...customResource(PLURALS[object.kind]), namespace, name, body: { metadata: { finalizers, resourceVersion } }, fieldManager: FIELD_MANAGER },
    MERGE_PATCH,
  );
}

export async function addFinalizer(ctx: OperatorContext, object: AnyResource): Promise<void> {
  const finalizers = object.metadata.finalizers ?? [];
  if (!finalizers.includes(FINALIZER)) await patchFinalizers(ctx, object, [...finalizers, FINALIZER]);
}

export async function removeFinalizer(ctx: OperatorContext, object: AnyResource): Promise<void> {
  const finalizers = object.metadata.finalizers ?? [];
  if (!finalizers.includes(FINALIZER)) return;
  try {
    await patchFinalizers(ctx, object, finalizers.filter((f) => f !== FINALIZER));
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

/** The label a Secret needs to be read when the operator runs with --require-secret-label. */
export const SECRET_LABEL = { name: "trackhook.io/secret", value: "true" } as const;

const labelled = (metadata: { labels?: Record<string, string> } | undefined) => metadata?.labels?.[SECRET_LABEL.name] === SECRET_LABEL.value;

/** The Secrets read for one compile, and each one's resourceVersion as read. */
export type SecretsRead = SecretLookup & { versionOf(name: string): string | undefined };

/**
 * Reads the named Secrets of a namespace for one compile: their values fresh, never cached (with
 * --require-secret-label, a Secret's label is first read from the metadata cache).
 */
export async function readSecrets(ctx: OperatorContext, namespace: string, names: readonly string[]): Promise<SecretsRead> {
  const found = new Map<string, Map<string, string> | RefusedSecret>();
  const versions = new Map<string, string>();
  await Promise.all(
    names.map(async (name) => {
      const unlabelled = () =>
        new RefusedSecret(
          `Secret ${namespace}/${name} lacks the label ${SECRET_LABEL.name}=${SECRET_LABEL.value}, which the operator (--require-secret-label) asks of every Secret it reads: \`kubectl label secret -n ${namespace} ${name} ${SECRET_LABEL.name}=${SECRET_LABEL.value}\``,
        );
      try {
        if (ctx.requireSecretLabel) {
          // Labels first, from the cache or as metadata only: the values of a Secret not meant
          // for trackhook are never fetched (found by a supply-chain review: read, then refused).
          // The cache may not have heard of a Secret applied a moment ago, and is stale while its
          // watch fails: then the metadata is read.
          const cached = ctx.secrets.failing(namespace) ? undefined : ctx.secrets.get(namespace, name);
          const { metadata } = cached ?? (await readMetadata(ctx.kube.kc, `/api/v1/namespaces/${namespace}/secrets/${name}`));
          if (!labelled(metadata)) {
            versions.set(name, metadata.resourceVersion ?? "");
            found.set(name, unlabelled());
            return;
          }
        }
        const secret = await ctx.kube.core.readNamespacedSecret({ name, namespace });
        versions.set(name, secret.metadata?.resourceVersion ?? "");
        // Again on what was fetched: the cache may still say labelled after the label went.
        if (ctx.requireSecretLabel && !labelled(secret.metadata)) {
          found.set(name, unlabelled());
          return;
        }
        found.set(name, secretValues(secret));
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }),
  );
  const lookup: SecretLookup = (ns, name) => (ns === namespace ? found.get(name) : undefined);
  return Object.assign(lookup, { versionOf: (name: string) => versions.get(name) });
}

/**
 * Secrets in the cache keep only their metadata: values are read when needed, never held. Their
 * labels too, so a Secret without SECRET_LABEL is refused without reading its values.
 */
export function secretMetadataOnly(object: KubeObject): KubeObject {
  const { name, namespace, uid, resourceVersion, labels } = object.metadata;
  return { metadata: { name, namespace, uid, resourceVersion, ...(labels ? { labels } : {}) } };
}

export const isDeleting = (object: KubeObject) => Boolean(object.metadata.deletionTimestamp);
