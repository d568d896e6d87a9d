// The operator: wins the leader Lease, then watches Sources, WebhookDestinations,
// DeletionRequests and Secrets, and reconciles each object through its kind's work queue into
// the trackhook-config bucket, JetStream consumers and delete notifications.
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { KvEntry } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { CONFIG_BUCKET, ConfigWriter, KvConfigProvider, ensureConfigBucket, parseConfigKey, secretNamesOf } from "../dataplane/config/mod.ts";
import type { Logger } from "../dataplane/logging.ts";
import { EVENTS_STREAM, StreamGuard, natsDisconnectedForMs, parseConsumerName, patiently } from "../dataplane/nats/mod.ts";
import { GROUP, VERSION, type CompiledConfig, type SourceDocument, type WebhookDestinationDocument } from "../schema/mod.ts";
import { readyOf } from "./conditions.ts";
import { ConfigDrift } from "./config-drift.ts";
import { EventRecorder } from "./events.ts";
import type { Kube, KubeObject } from "./kube/client.ts";
import { listMetadata, metadataOnly } from "./kube/metadata.ts";
import { Reflector, ReflectorSet, type WatchEventType } from "./kube/reflector.ts";
import { DEFAULT_LEASE, LeaderElector } from "./leader.ts";
import { DeliveryHealth } from "./delivery-health.ts";
import { OperatorMetrics } from "./metrics.ts";
import { checkInstalledCrds } from "./kube/crd-check.ts";
import { WorkQueue, type ReconcileResult } from "./queue.ts";
import {
  PLURALS,
  isDeleting,
  secretMetadataOnly,
  StatusWrites,
  type DeletionResource,
  type DestinationResource,
  type OperatorContext,
  type SourceResource,
} from "./reconcile/context.ts";
import { reconcileDeletion } from "./reconcile/deletion.ts";
import { reconcileDestination, removeConsumer } from "./reconcile/destination.ts";
import { reconcileSource, sourceKeysOf } from "./reconcile/source.ts";

export interface OperatorOptions {
  /** Namespace and name of the leader Lease. */
  leaseNamespace: string;
  leaseName: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  /** Every object is reconciled again this often, whatever the events said. */
  resyncMs: number;
  /** Replicas of the config bucket's stream. */
  configReplicas: number;
  /** How often the config bucket is looked for (made again when missing). */
  bucketCheckMs: number;
  /** A leader that has not reached NATS for this long hands the lease over and stops. */
  natsLossMs: number;
  /** Watch only these namespaces (a namespace-scoped install); empty: all namespaces. */
  watchNamespaces: readonly string[];
  /** Delivery runs with --allow-private-networks: destinations may name private addresses. */
  allowPrivateNetworks: boolean;
  /** Read only Secrets labelled SECRET_LABEL (--require-secret-label). */
  requireSecretLabel: boolean;
  /** A WebhookDestination's Delivering condition looks back this far (delivery-health.ts); 0: no such condition. */
  deliveryHealthWindowMs: number;
  identity: string;
}

export function operatorOptions(input: Partial<OperatorOptions> = {}): Readonly<OperatorOptions> {
  return Object.freeze({
    leaseNamespace: input.leaseNamespace ?? process.env.POD_NAMESPACE ?? "default",
    leaseName: input.leaseName ?? "trackhook-operator",
    ...DEFAULT_LEASE,
    resyncMs: 10 * 60_000,
    configReplicas: 1,
    bucketCheckMs: 5_000,
    natsLossMs: 60_000,
    watchNamespaces: [],
    allowPrivateNetworks: false,
    requireSecretLabel: false,
    deliveryHealthWindowMs: 5 * 60_000,
    identity: `${process.env.POD_NAME ?? hostname()}_${randomBytes(4).toString("hex")}`,
    ...input,
  });
}

type Kind = keyof typeof PLURALS;
/** A leader whose watch has failed this long is not ready (and says why). */
const WATCH_FAILING_READY_MS = 60_000;
const WATCH_FAILING_RESYNC_MS = 30_000;
/** "/api/v1/namespaces/x/secrets" -> "secrets". */
const resourceOf = (path: string) => path.slice(path.lastIndexOf("/") + 1);
const keyOf = (o: KubeObject) => `${o.metadata.namespace}/${o.metadata.name}`;
const split = (key: string) => key.split("/") as [string, string];

export class Operator {
  readonly metrics: OperatorMetrics;
  readonly #kube: Kube;
  readonly #nc: NatsConnection;
  readonly #log: Logger;
  readonly #options: Readonly<OperatorOptions>;
  readonly #elector: LeaderElector;
  #queues: Record<Kind, WorkQueue> | undefined;
  #reflectors: Array<Reflector<KubeObject>> = [];
  #sources: ReflectorSet<SourceResource> | undefined;
  #destinations: ReflectorSet<DestinationResource> | undefined;
  #deletions: ReflectorSet<DeletionResource> | undefined;
  /** Namespace-scoped: the config bucket's Sources, for the keys other operators' namespaces hold. */
  #owners: KvConfigProvider | undefined;
  #resync: NodeJS.Timeout | undefined;
  #failingResync: NodeJS.Timeout | undefined;
  #natsWatch: NodeJS.Timeout | undefined;
  /** Makes the config bucket again if it goes missing. */
  #bucketGuard: StreamGuard | undefined;
  /** Hears of the bucket's entries changed by others. */
  #drift: ConfigDrift | undefined;
  #synced = false;
  #ctx: OperatorContext | undefined;
  #deliveryHealth: DeliveryHealth | undefined;
  #stopped = false;

  constructor(deps: { kube: Kube; nc: NatsConnection; log: Logger; metrics?: OperatorMetrics }, options: Readonly<OperatorOptions>) {
    this.#kube = deps.kube;
    this.#nc = deps.nc;
    this.#log = deps.log;
    this.#options = options;
    this.metrics = deps.metrics ?? new OperatorMetrics();
    this.#elector = new LeaderElector(deps.kube, { namespace: options.leaseNamespace, name: options.leaseName, identity: options.identity, leaseDurationMs: options.leaseDurationMs, renewDeadlineMs: options.renewDeadlineMs, retryPeriodMs: options.retryPeriodMs }, deps.log);
  }

  get leading(): boolean {
    return this.#elector.leading;
  }

  /** Ready: the process works (a standby waiting for the lease is ready too), and a leader has synced caches. */
  readiness(): { ready: boolean; reason?: string } {
    if (this.#stopped) return { ready: false, reason: "stopping" };
    if (this.#elector.leading) {
      const failing = this.#reflectors.find((r) => r.failing.forMs > WATCH_FAILING_READY_MS);
      if (failing) return { ready: false, reason: `watching ${resourceOf(failing.path)} has failed for ${Math.round(failing.failing.forMs / 1000)} s (${failing.failing.error}): changes to them are not applied` };
      if (!this.#synced) return { ready: false, reason: "caches not synced yet" };
    }
    return { ready: true };
  }

  /**
   * Campaigns for the lease, then runs the controllers. Resolves once leading and synced, so
   * callers can await it; `onLost` is called if leadership is lost later (exit the process then).
   */
  /** Throws CrdsOutdatedError, before waiting for the lease, when the installed CRDs are older than this operator. */
  async run(onLost: (reason: string) => void): Promise<void> {
    const crdsChecked = await checkInstalledCrds(this.#kube.apiextensions, this.#log);
    this.#log.info({ identity: this.#options.identity, lease: `${this.#options.leaseNamespace}/${this.#options.leaseName}` }, "waiting to become the leader");
    await this.#elector.acquire((reason) => {
      this.metrics.leader.set(0);
      this.#log.error({ reason }, "lost leadership; stopping");
      onLost(reason);
    });
    this.metrics.leader.set(1);
    // The API server was away at start: look now, before anything is written with old CRDs
    // (found by a review: the check was skipped for good).
    if (!crdsChecked) await checkInstalledCrds(this.#kube.apiextensions, this.#log);
    // A leader cut off from NATS can apply nothing, and holding the lease keeps a standby that
    // reaches NATS idle (found by a review: 90 s of Retrying everywhere with a healthy standby).
    // It hands the lease over and stops; restarted, it waits for NATS before it contends again.
    natsDisconnectedForMs(this.#nc); // followed from now
    this.#natsWatch = setInterval(() => {
      const downMs = natsDisconnectedForMs(this.#nc);
      if (downMs < this.#options.natsLossMs || this.#stopped) return;
      clearInterval(this.#natsWatch);
      const reason = `NATS unreachable for ${Math.round(downMs / 1000)} s: the lease is handed to a replica that reaches it`;
      this.#log.error({ natsDownSeconds: Math.round(downMs / 1000) }, reason);
      this.metrics.leader.set(0);
      // Within seconds: an API server away too would hold release() while a standby leads.
      void Promise.race([this.#elector.release(), new Promise((resolve) => setTimeout(resolve, 5_000).unref())]).finally(() => onLost(reason));
    }, Math.min(5_000, this.#options.natsLossMs / 4));
    this.#natsWatch.unref();
    await this.#startControllers();
  }

  async #startControllers(): Promise<void> {
    const kv = await patiently("making the config bucket", () => ensureConfigBucket(this.#nc, { replicas: this.#options.configReplicas }, this.#log), this.#log);
    const jsm = await jetstreamManager(this.#nc);
    const { kc, custom } = this.#kube;
    const withKind = (kind: Kind) => (o: KubeObject) => ({ ...o, kind }) as KubeObject;
    // One reflector per watched namespace, or one for all of them.
    const watched = this.#options.watchNamespaces.length > 0 ? this.#options.watchNamespaces : [undefined];
    const reflect = <T extends KubeObject>(make: (ns: string | undefined) => Reflector<T>) => new ReflectorSet<T>(new Map(watched.map((ns) => [ns, make(ns)])));
    const customResources = <T extends KubeObject>(kind: Kind, onEvent: (type: WatchEventType, o: T, previous: T | undefined) => void) => (ns: string | undefined) => {
      const plural = PLURALS[kind];
      return new Reflector<T>({
        kc, log: this.#log, transform: withKind(kind) as (o: KubeObject) => T, onEvent,
        path: `/apis/${GROUP}/${VERSION}/${ns ? `namespaces/${ns}/` : ""}${plural}`,
        list: () =>
          ns
            ? custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural })
            : custom.listCustomObjectForAllNamespaces({ group: GROUP, version: VERSION, resourcePlural: plural }),
      });
    };
    const sources = reflect(customResources<SourceResource>("Source", (t, o, p) => this.#onSource(t, o, p)));
    const destinations = reflect(customResources<DestinationResource>("WebhookDestination", (t, o, p) => this.#onDestination(t, o, p)));
    const deletions = reflect(customResources<DeletionResource>("DeletionRequest", (t, o) => this.#onDeletion(t, o)));
    // Secrets as metadata only: a change is all the operator needs to hear of; values are read per reconcile.
    const secrets = reflect((ns) => {
      const path = ns ? `/api/v1/namespaces/${ns}/secrets` : "/api/v1/secrets";
      return new Reflector<KubeObject>({ kc: metadataOnly(kc), log: this.#log, path, list: () => listMetadata(kc, path), transform: secretMetadataOnly, onEvent: (_t, o) => this.#onSecret(o) });
    });

    const events = new EventRecorder(this.#kube, this.#options.identity, this.#log);
    const deliveryHealth = new DeliveryHealth({
      jsm, destinations, events, log: this.#log,
      requeue: (namespace, name) => this.#queues?.WebhookDestination.add(`${namespace}/${name}`),
    }, { windowMs: this.#options.deliveryHealthWindowMs });
    const ctx: OperatorContext = {
      kube: this.#kube, log: this.#log, metrics: this.metrics, events, deliveryHealth,
      config: new ConfigWriter(kv), jsm, js: jetstream(this.#nc),
      sources, destinations, deletions, secrets, sourceDigests: new Map(), statusWrites: new StatusWrites(), allowPrivateNetworks: this.#options.allowPrivateNetworks,
      requireSecretLabel: this.#options.requireSecretLabel,
      requeue: (kind, namespace, name) => this.#queues?.[kind].add(`${namespace}/${name}`),
      inScope: (namespace) => this.#inScope(namespace),
    };
    const queue = (kind: Kind, reconcile: (ctx: OperatorContext, ns: string, name: string) => Promise<ReconcileResult>) =>
      new WorkQueue({
        name: kind,
        log: this.#log,
        onDepth: (depth) => this.metrics.queueDepth.set({ kind }, depth),
        handler: async (key) => {
          const end = this.metrics.reconcileSeconds.startTimer({ kind });
          try {
            const result = await reconcile(ctx, ...split(key));
            this.metrics.reconciles.inc({ kind, result: result?.requeueAfterMs !== undefined ? "requeue" : "success" });
            return result;
          } catch (err) {
            this.metrics.reconciles.inc({ kind, result: "error" });
            throw err;
          } finally {
            end();
          }
        },
      });
    this.#queues = {
      Source: queue("Source", reconcileSource),
      WebhookDestination: queue("WebhookDestination", reconcileDestination),
      DeletionRequest: queue("DeletionRequest", reconcileDeletion),
    };
    this.#sources = sources;
    this.#destinations = destinations;
    this.#deletions = deletions;
    this.#reflectors = [...sources.members, ...destinations.members, ...deletions.members, ...secrets.members] as Array<Reflector<KubeObject>>;
    this.metrics.readWatchesFrom(() => this.#reflectors.map((r) => ({ resource: resourceOf(r.path), failingSeconds: Math.round(r.failing.forMs / 1000) })));
    this.metrics.readResourcesFrom(() =>
      [sources, destinations, deletions].flatMap((cache) =>
        (cache.list() as Array<SourceResource | DestinationResource | DeletionResource>).map((o) => {
          const ready = readyOf(o.status?.conditions);
          return { kind: o.kind, ready: ready?.status ?? "Unknown", reason: ready?.reason ?? "NotReconciledYet" };
        }),
      ),
    );
    // Sources first: a destination's reconcile resolves its sources from that cache.
    await sources.start();
    await Promise.all([destinations.start(), deletions.start(), secrets.start()]);
    // Which Source holds which key outlives the operator in the bucket: read back before any
    // reconcile may run. Without it, a newer Source that copied another's key and came first
    // would take that key's traffic until the older one's turn. (An entry whose Source is gone
    // loses the key to the first live claimant, as the orphan collection below removes it.)
    const owners = await KvConfigProvider.start(this.#nc, this.#log.child({ reading: "write-key owners" }), { part: "sources", kv });
    for (const s of owners.current().sources) ctx.sourceDigests.set(`${s.namespace}/${s.name}`, sourceKeysOf(s));
    if (this.#options.watchNamespaces.length > 0) {
      // Scoped, this operator cannot see the Sources of namespaces other operators watch, but their
      // keys are in the bucket: followed, so that a key one of them holds is refused here too
      // (found by a multi-tenant review: two releases on one NATS each accepted one key, and
      // ingest sent its traffic to one of them).
      const followOthers = (sources: CompiledConfig["sources"]) => {
        const theirs = new Set<string>();
        for (const s of sources) {
          if (this.#inScope(s.namespace)) continue;
          theirs.add(`${s.namespace}/${s.name}`);
          ctx.sourceDigests.set(`${s.namespace}/${s.name}`, sourceKeysOf(s));
        }
        for (const id of ctx.sourceDigests.keys()) if (!this.#inScope(id.slice(0, id.indexOf("/"))) && !theirs.has(id)) ctx.sourceDigests.delete(id);
      };
      owners.subscribe((config) => followOthers(config.sources));
      this.#owners = owners;
    } else {
      owners.close();
    }
    this.#synced = true;
    this.#ctx = ctx;
    this.#deliveryHealth = deliveryHealth;
    deliveryHealth.start();
    await this.#collectOrphans();
    // Events before every cache was synced were not queued: now each object gets its reconcile,
    // with the whole picture (a deletion request needs to know the destinations).
    this.#resyncAll();
    this.#resync = setInterval(() => {
      this.#resyncAll();
      void this.#collectOrphans();
    }, this.#options.resyncMs);
    this.#resync.unref();
    // While a watch fails, its changes (a rotated Secret) are heard of only at a resync: then one
    // every WATCH_FAILING_RESYNC_MS, reconciles reading what they need fresh from the API server.
    this.#failingResync = setInterval(() => {
      if (this.#reflectors.some((r) => r.failing.forMs > 0)) this.#resyncAll();
    }, WATCH_FAILING_RESYNC_MS);
    this.#failingResync.unref();
    // Deleted by hand, or lost with nats-server's store: made again, and every resource written
    // to it again at once (found by a review: every reconcile failed until the operator was
    // restarted, and a new ingest pod waited for the bucket, answering 503).
    this.#drift = new ConfigDrift(kv, ctx.config, (entry) => this.#onDrift(entry), this.#log);
    this.#bucketGuard = new StreamGuard(this.#nc, jsm, [{
      name: `KV_${CONFIG_BUCKET}`,
      make: () => ensureConfigBucket(this.#nc, { replicas: this.#options.configReplicas }, this.#log),
      onMade: () => {
        this.#drift?.restart();
        this.#resyncAll();
      },
      said: "the config bucket was missing (deleted, or nats-server lost its store) and is made again; every Source and WebhookDestination is written to it again",
      // Restored from a backup: it holds what was true then (a revoked key, a deleted
      // destination), which ingest and delivery pods load, until written again (found by a
      // disaster-recovery review: stale until the resync, ten minutes later).
      rolledBack: {
        run: () => {
          this.#drift?.restart();
          this.#resyncAll();
          void this.#collectOrphans();
        },
        said: "the config bucket went back to older content (restored from a backup?); every Source and WebhookDestination is written to it again, and entries of resources since deleted are removed",
      },
    }], this.#log, { everyMs: this.#options.bucketCheckMs, recreated: this.metrics.streamsRecreated });
    this.#log.info({ sources: sources.list().length, destinations: destinations.list().length }, "operator running");
  }

  #inScope(namespace: string): boolean {
    return this.#options.watchNamespaces.length === 0 || this.#options.watchNamespaces.includes(namespace);
  }

  /**
   * Deletes bucket entries and consumers whose resource is gone — removed while no operator ran,
   * or with its finalizer forced off — so an old write key cannot keep working.
   */
  async #collectOrphans(): Promise<void> {
    const ctx = this.#ctx;
    if (!ctx) return;
    try {
      for await (const key of await ctx.config.kv.keys()) {
        const parsed = parseConfigKey(key);
        if (!parsed || !this.#inScope(parsed.namespace)) continue;
        const { kind, namespace: ns, name } = parsed;
        const gone = kind === "source" ? !ctx.sources.get(ns, name) : !ctx.destinations.get(ns, name);
        if (!gone) continue;
        await ctx.config.delete(key);
        this.#log.info({ key }, "removed a config entry whose resource no longer exists");
      }
      for await (const consumer of ctx.jsm.consumers.list(EVENTS_STREAM)) {
        const owner = parseConsumerName(consumer.name);
        if (!owner || !this.#inScope(owner.namespace) || ctx.destinations.get(owner.namespace, owner.destination)) continue;
        await removeConsumer(ctx, owner.namespace, owner.destination, "destination_deleted");
        this.#log.info({ consumer: consumer.name }, "removed a consumer whose WebhookDestination no longer exists");
      }
    } catch (err) {
      // The events stream may not exist yet; the next resync tries again.
      this.#log.warn({ err: (err as Error).message }, "could not check for orphaned config entries and consumers");
    }
  }

  /**
   * An entry someone else wrote or deleted: its resource is reconciled, which writes it again,
   * or, with no resource (in this operator's namespaces), it is removed.
   */
  #onDrift(entry: KvEntry): void {
    const parsed = parseConfigKey(entry.key);
    if (!parsed || !this.#inScope(parsed.namespace)) return;
    const { kind, namespace, name } = parsed;
    const owner = kind === "source" ? this.#sources?.get(namespace, name) : this.#destinations?.get(namespace, name);
    if (!owner && entry.operation !== "PUT") return; // gone, as it should be
    this.#log.warn(
      { key: entry.key, operation: entry.operation, revision: entry.revision },
      owner
        ? "a config entry was changed by someone other than the operator; written again from its resource"
        : "a config entry with no resource was written by someone other than the operator; removed",
    );
    if (owner) this.#queues?.[kind === "source" ? "Source" : "WebhookDestination"].add(keyOf(owner));
    else void this.#collectOrphans();
  }

  #resyncAll(): void {
    for (const o of this.#sources?.list() ?? []) this.#queues?.Source.add(keyOf(o));
    for (const o of this.#destinations?.list() ?? []) this.#queues?.WebhookDestination.add(keyOf(o));
    for (const o of this.#deletions?.list() ?? []) this.#queues?.DeletionRequest.add(keyOf(o));
  }

  /** Spec, labels (selectors), finalizers or deletion changed; not a status write of our own. */
  static #changed(object: KubeObject, previous: KubeObject | undefined): boolean {
    if (!previous) return true;
    const a = object.metadata;
    const b = previous.metadata;
    return a.generation !== b.generation || a.deletionTimestamp !== b.deletionTimestamp
      || JSON.stringify(a.labels) !== JSON.stringify(b.labels) || JSON.stringify(a.finalizers) !== JSON.stringify(b.finalizers);
  }

  #onSource(type: WatchEventType, source: SourceResource, previous: SourceResource | undefined): void {
    if (!this.#synced) return;
    if (type !== "DELETED" && !Operator.#changed(source, previous)) {
      // Its Ready flipped (a status write of ours): its destinations say whether it takes messages.
      const [now, before] = [readyOf(source.status?.conditions), readyOf(previous?.status?.conditions)];
      if (now?.status !== before?.status || now?.reason !== before?.reason) {
        this.#log.debug({ source: keyOf(source), ready: `${now?.status} ${now?.reason}`, was: `${before?.status} ${before?.reason}` }, "source's Ready changed; its namespace's destinations are reconciled");
        for (const d of this.#destinationsIn(source.metadata.namespace)) this.#queues?.WebhookDestination.add(keyOf(d));
      }
      return;
    }
    this.#queues?.Source.add(keyOf(source));
    // A destination's Ready and its resolved sources depend on which Sources exist (and labels).
    for (const d of this.#destinationsIn(source.metadata.namespace)) this.#queues?.WebhookDestination.add(keyOf(d));
  }

  #onDestination(type: WatchEventType, destination: DestinationResource, previous: DestinationResource | undefined): void {
    if (!this.#synced) return;
    if (type === "DELETED" || Operator.#changed(destination, previous)) this.#queues?.WebhookDestination.add(keyOf(destination));
  }

  #onDeletion(type: WatchEventType, request: DeletionResource): void {
    if (!this.#synced) return;
    // Requests are acted on once; updates are our own status writes (the spec is immutable).
    if (type === "ADDED" && !isDeleting(request)) this.#queues?.DeletionRequest.add(keyOf(request));
  }

  /** A Secret changed: reconcile whatever reads it (a rotated write key takes effect now). */
  #onSecret(secret: KubeObject): void {
    if (!this.#synced) return;
    const { namespace, name } = secret.metadata;
    for (const s of this.#sources?.list(namespace) ?? []) {
      if (secretNamesOf(s as unknown as SourceDocument).includes(name)) this.#queues?.Source.add(keyOf(s));
    }
    for (const d of this.#destinationsIn(namespace)) {
      if (secretNamesOf(d as unknown as WebhookDestinationDocument).includes(name)) this.#queues?.WebhookDestination.add(keyOf(d));
    }
  }

  #destinationsIn(namespace: string): DestinationResource[] {
    return this.#destinations?.list(namespace) ?? [];
  }

  /** Stops watching, lets running reconciles finish, and hands the lease to a standby. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#resync);
    clearInterval(this.#failingResync);
    clearInterval(this.#natsWatch);
    this.#bucketGuard?.stop();
    this.#drift?.stop();
    await this.#deliveryHealth?.stop();
    for (const r of this.#reflectors) r.stop();
    this.#owners?.close();
    if (this.#queues) await Promise.all(Object.values(this.#queues).map((q) => q.stop()));
    await this.#elector.release();
    this.metrics.leader.set(0);
  }
}
