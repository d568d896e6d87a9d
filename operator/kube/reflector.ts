// A list-then-watch loop keeping a cache of one kind of object, like client-go's reflector:
// it re-watches from the last resourceVersion when the server closes the stream, re-lists when
// that version is too old (410 Gone), and backs off on errors instead of giving up.
import { Watch, type KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "../../dataplane/logging.ts";
import { apiErrorMessage, apiStatus, type KubeObject } from "./client.ts";

export type WatchEventType = "ADDED" | "MODIFIED" | "DELETED";

export interface ReflectorOptions<T extends KubeObject> {
  kc: KubeConfig;
  /** Collection path for all namespaces, e.g. /apis/trackhook.io/v1alpha1/sources. */
  path: string;
  /** Lists the collection (all namespaces) through the typed client. */
  list: () => Promise<{ items: KubeObject[]; metadata?: { resourceVersion?: string } }>;
  /** What the cache keeps of each object (Secrets: metadata only, never their data). */
  transform?: (object: KubeObject) => T;
  onEvent: (type: WatchEventType, object: T, previous: T | undefined) => void;
  log: Logger;
}

const key = (object: KubeObject) => `${object.metadata.namespace ?? ""}/${object.metadata.name}`;

export class Reflector<T extends KubeObject> {
  readonly #options: ReflectorOptions<T>;
  readonly #cache = new Map<string, T>();
  #resourceVersion = "";
  #abort: AbortController | undefined;
  #stopped = false;
  #failures = 0;
  /** Since when every list or watch has failed (undefined while they work), and the last error. */
  #failingSince: number | undefined;
  #lastError = "";
  /** What failed last: a list that works again ends a list failure, but only a watch that works ends a watch failure. */
  #failed: "list" | "watch" | undefined;

  constructor(options: ReflectorOptions<T>) {
    this.#options = options;
  }

  get(namespace: string, name: string): T | undefined {
    return this.#cache.get(`${namespace}/${name}`);
  }

  /**
   * How long the list and watch have been failing (0 while they work) and why: the cache is stale
   * meanwhile, and changes to this kind are not heard of (a review revoked `list secrets`, and key
   * rotations waited for the 10-minute resync while every status said all was well).
   */
  get failing(): { forMs: number; error: string } {
    return this.#failingSince === undefined ? { forMs: 0, error: "" } : { forMs: Date.now() - this.#failingSince, error: this.#lastError };
  }

  /** The collection this reflector follows. */
  get path(): string {
    return this.#options.path;
  }

  list(namespace?: string): T[] {
    const all = [...this.#cache.values()];
    return namespace === undefined ? all : all.filter((o) => o.metadata.namespace === namespace);
  }

  /** Resolves once the first list is in the cache, so reconciles start from a synced view. */
  async start(): Promise<void> {
    for (;;) {
      try {
        await this.#relist();
        break;
      } catch (err) {
        if (this.#stopped) return;
        await this.#backoff("list", err);
      }
    }
    void this.#watchLoop();
  }

  stop(): void {
    this.#stopped = true;
    this.#abort?.abort();
  }

  async #relist(): Promise<void> {
    const list = await this.#options.list();
    const seen = new Set<string>();
    for (const raw of list.items) {
      const object = this.#transform(raw);
      seen.add(key(object));
      this.#store("ADDED", object);
    }
    for (const [k, object] of this.#cache) {
      if (!seen.has(k)) {
        this.#cache.delete(k);
        this.#options.onEvent("DELETED", object, object);
      }
    }
    this.#resourceVersion = list.metadata?.resourceVersion ?? "";
    // A watch refused while lists work (RBAC with list but not watch) would otherwise list again
    // every second, and never be seen failing (found by a review).
    if (this.#failed !== "watch") this.#healthy();
  }

  #healthy(): void {
    this.#failures = 0;
    this.#failingSince = undefined;
    this.#failed = undefined;
  }

  #transform(raw: KubeObject): T {
    return this.#options.transform ? this.#options.transform(raw) : (raw as T);
  }

  #store(type: WatchEventType, object: T): void {
    const k = key(object);
    const previous = this.#cache.get(k);
    if (type === "DELETED") {
      this.#cache.delete(k);
      this.#options.onEvent("DELETED", object, previous);
      return;
    }
    if (previous?.metadata.resourceVersion === object.metadata.resourceVersion) return;
    this.#cache.set(k, object);
    this.#options.onEvent(previous ? "MODIFIED" : "ADDED", object, previous);
  }

  async #watchLoop(): Promise<void> {
    const watch = new Watch(this.#options.kc);
    // client-node gives up on a watch after 30 s without a byte, and a quiet collection sends
    // nothing but the odd bookmark: every quiet watch was re-opened each 30 s (a review counted 8
    // extra watch requests a minute; a quiet collection measured 4 watches in 100 s, now 2). A
    // dead connection is still noticed within this.
    Reflect.set(watch, "requestTimeoutMs", WATCH_INACTIVITY_MS);
    while (!this.#stopped) {
      let gone = false;
      let failed: (KubeObject & { code?: number; message?: string }) | undefined;
      const ended = new Promise<unknown>((resolve) => {
        watch
          .watch(
            this.#options.path,
            // The server ends a watch after timeoutSeconds; jitter spreads the re-watches.
            { resourceVersion: this.#resourceVersion, allowWatchBookmarks: true, timeoutSeconds: 240 + Math.floor(Math.random() * 120) },
            (phase, object: KubeObject & { code?: number }) => {
              if (phase === "BOOKMARK") {
                this.#resourceVersion = object.metadata.resourceVersion;
                this.#healthy();
              } else if (phase === "ERROR") {
                gone = object.code === 410;
                if (!gone) failed = object;
              } else {
                this.#resourceVersion = object.metadata.resourceVersion;
                this.#healthy();
                this.#store(phase as WatchEventType, this.#transform(object));
              }
            },
            resolve,
          )
          .then((abort) => (this.#abort = abort), resolve);
      });
      const err = await ended;
      if (this.#stopped) return;
      try {
        if (isInactivityTimeout(err)) {
          // client-node ended a watch that was silent for WATCH_INACTIVITY_MS; a quiet collection is
          // normal, so watch again from where we were, without a list or a warning.
          this.#healthy();
          continue;
        }
        if (gone) {
          this.#options.log.debug({ path: this.#options.path }, "watch too old; listing again");
          await this.#relist();
        } else if (err || failed) {
          // An ERROR event ends the stream cleanly; without the backoff a persistent one would
          // re-watch in a tight loop.
          await this.#backoff("watch", err ?? new Error(`watch error ${failed?.code ?? ""}: ${failed?.message ?? "unknown"}`));
          await this.#relist();
        } else this.#healthy(); // the server ended it after timeoutSeconds: it worked
      } catch (relistErr) {
        await this.#backoff("list", relistErr);
      }
    }
  }

  async #backoff(what: string, err: unknown): Promise<void> {
    this.#failures++;
    this.#failingSince ??= Date.now();
    this.#lastError = `${what}: ${apiErrorMessage(err)}`;
    this.#failed = this.#failed === "watch" || what === "watch" ? "watch" : "list";
    const ms = Math.min(30_000, 500 * 2 ** Math.min(this.#failures, 6));
    const fields = { path: this.#options.path, err: apiErrorMessage(err), retryInMs: ms };
    // 429 right after CRDs are installed ("storage is (re)initializing") is the API server warming up.
    if (apiStatus(err) === 429) this.#options.log.info(fields, `${what}: the API server is not ready for this kind yet; retrying`);
    else this.#options.log.warn(fields, `${what} failed; retrying`);
    await new Promise((resolve) => setTimeout(resolve, ms).unref());
  }
}

/** Longer than the API server's bookmark interval (1 min), shorter than a watch's own timeout (4-6 min). */
const WATCH_INACTIVITY_MS = 90_000;

function isInactivityTimeout(err: unknown): boolean {
  return err instanceof Error && err.name === "TimeoutError";
}

/** What reconciles read: one kind's cache, whatever the namespaces watched. */
export interface ObjectCache<T extends KubeObject> {
  get(namespace: string, name: string): T | undefined;
  list(namespace?: string): T[];
}

/**
 * One kind watched in several namespaces (`--watch-namespace a,b`), read as one cache: a
 * reflector per namespace, so RBAC can be a Role in each rather than cluster-wide.
 */
export class ReflectorSet<T extends KubeObject> implements ObjectCache<T> {
  readonly #byNamespace: ReadonlyMap<string | undefined, Reflector<T>>;

  /** @param reflectors by the namespace each watches; one keyed undefined watches them all. */
  constructor(reflectors: ReadonlyMap<string | undefined, Reflector<T>>) {
    this.#byNamespace = reflectors;
  }

  get members(): Array<Reflector<T>> {
    return [...this.#byNamespace.values()];
  }

  get(namespace: string, name: string): T | undefined {
    return this.#watching(namespace)?.get(namespace, name);
  }

  list(namespace?: string): T[] {
    if (namespace !== undefined) return this.#watching(namespace)?.list(namespace) ?? [];
    return this.members.flatMap((r) => r.list());
  }

  /** Whether the cache of a namespace is stale: its list and watch are failing. */
  failing(namespace: string): boolean {
    return (this.#watching(namespace)?.failing.forMs ?? 0) > 0;
  }

  /** The reflector of a namespace: its own, or the one of all namespaces; none if not watched. */
  #watching(namespace: string): Reflector<T> | undefined {
    return this.#byNamespace.get(namespace) ?? this.#byNamespace.get(undefined);
  }

  async start(): Promise<void> {
    await Promise.all(this.members.map((r) => r.start()));
  }

  stop(): void {
    for (const r of this.members) r.stop();
  }
}
