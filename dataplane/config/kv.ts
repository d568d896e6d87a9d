// The trackhook-config KV bucket: the operator writes one entry per Source and per
// WebhookDestination, already compiled (write keys as digests); ingest and delivery pods started
// with `--config-from nats` watch it and apply every change live.
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV, type KvEntry, type KvStatus } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  CompiledDestination,
  CompiledSource,
  describeErrors,
  validateCompiledDestination,
  validateCompiledSource,
  type CompiledConfig,
} from "../../schema/mod.ts";
import type { Logger } from "../logging.ts";
import { hasMessagesOn } from "../nats/mod.ts";
import { LogInterval } from "../telemetry/mod.ts";
import type { ConfigPart } from "./compile.ts";
import { ConfigHolder } from "./provider.ts";

export const CONFIG_BUCKET = "trackhook-config";

/** `source.<namespace>.<name>`: names are DNS labels, so they are valid key tokens. */
export const sourceKey = (namespace: string, name: string) => `source.${namespace}.${name}`;
export const destinationKey = (namespace: string, name: string) => `destination.${namespace}.${name}`;

/** The kind, namespace and name a key of sourceKey or destinationKey names; undefined for any other key. */
export function parseConfigKey(key: string): { kind: "source" | "destination"; namespace: string; name: string } | undefined {
  const [kind, namespace, name, ...rest] = key.split(".");
  if ((kind !== "source" && kind !== "destination") || !namespace || !name || rest.length > 0) return undefined;
  return { kind, namespace, name };
}

export interface ConfigBucketOptions {
  /** JetStream replicas of the bucket's stream (1 locally, 3 in production). */
  replicas?: number;
}

/** Creates the bucket when missing (the operator's job), or opens it as it is. */
export async function ensureConfigBucket(nc: NatsConnection, options: ConfigBucketOptions = {}, log?: Logger): Promise<KV> {
  // history 1: only the current config matters; older revisions would only hold old secrets.
  const kv = await new Kvm(nc).create(CONFIG_BUCKET, { history: 1, replicas: options.replicas ?? 1 });
  const replicas = (await kv.status()).replicas;
  if (options.replicas !== undefined && replicas !== options.replicas) {
    // create() opens an existing bucket as it is; changing replicas is an explicit NATS operation.
    log?.warn({ bucket: CONFIG_BUCKET, replicas, wanted: options.replicas }, "the config bucket exists with other replicas; change them with `nats stream edit KV_trackhook-config --replicas`");
  }
  return kv;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Writes compiled resources, skipping writes that would not change the stored value, and
 * remembers what it last wrote or found under each key, so that a change made by anyone else
 * can be told from its own (wroteLast).
 */
export class ConfigWriter {
  readonly kv: KV;
  /** Each key's value as this writer last left it: its JSON, or null for none. */
  readonly #left = new Map<string, string | null>();

  constructor(kv: KV) {
    this.kv = kv;
  }

  /** Returns whether the stored value changed. */
  async put(key: string, value: CompiledSource | CompiledDestination): Promise<boolean> {
    const bytes = JSON.stringify(value);
    this.#left.set(key, bytes);
    const current = await this.kv.get(key);
    if (current?.operation === "PUT" && decoder.decode(current.value) === bytes) return false;
    await this.kv.put(key, encoder.encode(bytes));
    return true;
  }

  /** Returns whether there was a value to delete. */
  async delete(key: string): Promise<boolean> {
    this.#left.set(key, null);
    const current = await this.kv.get(key);
    if (!current || current.operation !== "PUT") return false;
    await this.kv.delete(key);
    return true;
  }

  /** Whether the entry is what this writer last left under its key (its own write, or one that changed nothing). */
  wroteLast(entry: KvEntry): boolean {
    const left = this.#left.get(entry.key);
    if (left === undefined) return false;
    return entry.operation === "PUT" ? left === decoder.decode(entry.value) : left === null;
  }

  async get<T extends CompiledSource | CompiledDestination>(key: string): Promise<T | undefined> {
    const current = await this.kv.get(key);
    return current?.operation === "PUT" ? (JSON.parse(decoder.decode(current.value)) as T) : undefined;
  }
}

/**
 * Whether the bucket went back to older content (restored from a backup) since `seen` was read:
 * its stream ends below that revision, or ends at it with another entry (the operator wrote as
 * many again since the restore: found by a diff review, a key rotated after the backup and
 * written again at the same revision went unseen). From the stream's state alone: reading the
 * entry at a revision would need a permission that reads every entry, shared secrets too. Written
 * past that revision since, the entries above it are read; those at or below it are not.
 */
function wentBack(status: KvStatus, seen: { revision: number; at?: number }): boolean {
  const { last_seq: lastSeq, last_ts: lastAt } = status.streamInfo.state;
  return lastSeq < seen.revision || (lastSeq === seen.revision && seen.at !== undefined && Date.parse(lastAt) !== seen.at);
}

const PART_KEYS: Record<ConfigPart, string> = { all: ">", sources: "source.>", destinations: "destination.>" };

/**
 * Follows the bucket and keeps the compiled config in step with it. An entry that does not
 * validate is logged and ignored (its previous value stays), so one bad write cannot take the
 * data plane down. `ready` is false until the bucket's content at start has been read.
 */
export class KvConfigProvider extends ConfigHolder {
  readonly #sources = new Map<string, CompiledSource>();
  readonly #destinations = new Map<string, CompiledDestination>();
  readonly #log: Logger;
  readonly #part: ConfigPart;
  /** For a part's "is there anything to load?" (the whole bucket's status says it for "all"). */
  readonly #jsm: JetStreamManager;
  #stopped = false;
  #ready = false;
  #stopWatch: () => void = () => {};
  readonly #failedLines = new LogInterval(60_000);
  /**
   * What a lost bucket held, kept in effect under the new bucket's entries until that has been
   * refilled (no new entry for REFILL_MS): a bucket made again is empty until the operator
   * writes every resource again, and an empty config would have ingest answer 401 to every SDK
   * (which drops the events) and delivery stop every destination meanwhile (found by a review).
   */
  #refillMs = REFILL_MS;
  #held: { sources: Map<string, CompiledSource>; destinations: Map<string, CompiledDestination>; timer?: NodeJS.Timeout } | undefined;

  private constructor(log: Logger, part: ConfigPart, jsm: JetStreamManager) {
    super();
    this.#log = log;
    this.#part = part;
    this.#jsm = jsm;
  }

  /**
   * Resolves once the bucket's current content (of `part`, "all" by default) is loaded. Waits for
   * the bucket when the operator has not created it yet, logging every `retryMs` (2 s by default),
   * unless the caller already holds it (`kv`).
   */
  static async start(nc: NatsConnection, log: Logger, options: { retryMs?: number; part?: ConfigPart; kv?: KV; /** Tests shorten it. */ refillMs?: number } = {}): Promise<KvConfigProvider> {
    const { retryMs = 2000, part = "all" } = options;
    const provider = new KvConfigProvider(log, part, await jetstreamManager(nc, { checkAPI: false }));
    if (options.refillMs !== undefined) provider.#refillMs = options.refillMs;
    const kv = options.kv ?? (await openWhenCreated(nc, log, retryMs, () => provider.#stopped));
    await provider.#follow(kv, retryMs);
    return provider;
  }

  /** Whether the followed part of the bucket has no entry (not even a delete marker) to load. */
  async #nothingToLoad(status: KvStatus): Promise<boolean> {
    if (this.#part === "all") return status.values === 0;
    return !(await hasMessagesOn(this.#jsm, status.streamInfo.config.name, `$KV.${CONFIG_BUCKET}.${PART_KEYS[this.#part]}`));
  }

  get ready(): boolean {
    return this.#ready;
  }

  async #follow(kv: KV, retryMs: number): Promise<void> {
    let loaded!: () => void;
    const initialLoad = new Promise<void>((resolve) => (loaded = resolve));
    /** The last revision read, and when it was written (to tell it from another at the same revision). */
    let seen: { revision: number; at?: number } = { revision: 0 };
    let created: string | undefined;
    const run = async () => {
      while (!this.#stopped) {
        let check: NodeJS.Timeout | undefined;
        let probe: NodeJS.Timeout | undefined;
        try {
          const status = await kv.status();
          const remade = created !== undefined && status.streamInfo.created !== created;
          if (remade || wentBack(status, seen)) {
            // The bucket was deleted and created again (lost storage), or restored from a backup
            // (the same bucket, its revisions gone back): resuming after the last revision seen
            // would skip every entry written since, which reuse the lower revisions (found by a
            // disaster-recovery review: a key rotated after a restore was refused for as long as
            // the pod ran). Start over from its current content.
            this.#log.warn(
              { bucket: CONFIG_BUCKET, lastRevisionSeen: seen.revision, bucketLastRevision: status.streamInfo.state.last_seq },
              remade
                ? "the config bucket was created again; reloading it, and keeping the config the lost one held in effect until it is refilled"
                : "the config bucket's revisions went back (restored from a backup?); reloading it, and keeping the config held until then in effect under its entries until the operator has written them again",
            );
            // Made again while an earlier loss was still being refilled: what that one held counts too.
            if (this.#held) clearTimeout(this.#held.timer);
            this.#held = {
              sources: new Map([...(this.#held?.sources ?? []), ...this.#sources]),
              destinations: new Map([...(this.#held?.destinations ?? []), ...this.#destinations]),
            };
            this.#sources.clear();
            this.#destinations.clear();
            seen = { revision: 0 };
          }
          created = status.streamInfo.created;
          const empty = await this.#nothingToLoad(status);
          // One key filter, so the consumer's create request names it (what permissions check).
          const watch = await kv.watch({ key: PART_KEYS[this.#part], ...(seen.revision > 0 ? { resumeFromRevision: seen.revision + 1 } : {}) });
          this.#stopWatch = () => watch.stop();
          // A watcher does not notice its bucket being deleted; look now and then, and start
          // over when it is gone or is another bucket of the same name.
          check = setInterval(() => {
            kv.status().then(
              (now) => (now.streamInfo.created !== created || wentBack(now, seen)) && watch.stop(),
              () => watch.stop(),
            );
          }, retryMs * 5);
          check.unref();
          probe = this.#probeWatcher(watch, () => seen.revision);
          if (empty) {
            if (!this.#ready) this.#loaded(loaded);
            else this.#publish();
          }
          for await (const entry of watch) {
            seen = { revision: entry.revision, at: entry.created.getTime() };
            const changed = this.#apply(entry);
            // Refilled once no entry came for refillMs: the operator writes them one by one, and
            // thousands may take longer than any fixed wait (found by a review).
            if (this.#held) {
              clearTimeout(this.#held.timer);
              this.#held.timer = setTimeout(() => this.#refilled(), this.#refillMs).unref();
            }
            // Until delta 0 (caught up with the bucket) entries are the content at start: one
            // config is published for all of them, not a partial one per entry.
            if (!this.#ready) {
              if (entry.delta === 0) this.#loaded(loaded);
            } else if (changed) {
              // Which entry changed, never its value (destinations carry shared secrets).
              this.#log.info({ key: entry.key, operation: entry.operation, revision: entry.revision }, "config changed");
              this.#publish();
            }
          }
        } catch (err) {
          // Once a minute: retried every 2 s, it said so 30 times a minute while the operator was
          // away (found by a disaster-recovery review).
          const held = this.#stopped ? undefined : this.#failedLines.pass();
          if (held !== undefined) this.#log.warn({ err: (err as Error).message, moreLikeThisSinceLastLine: held }, "watching the config bucket failed; retrying");
        } finally {
          clearInterval(check);
          clearInterval(probe);
        }
        if (!this.#stopped) await sleep(retryMs);
      }
    };
    void run();
    await initialLoad;
  }

  /**
   * Looks at the watch's consumer every WATCHER_PROBE_MS and stops the watch (which #follow then
   * starts again, from the next revision) once it is missing or silent at two looks in a row.
   *
   * Why: a watch's consumer lives on one NATS node. When that node dies, nats.js notices only
   * after two missed heartbeats of 30 s, so this replica went on with its old config for 60-90 s
   * without a word: a rotated write key refused, a changed webhook URL ignored.
   */
  #probeWatcher(watch: KvWatch, revision: () => number): NodeJS.Timeout | undefined {
    const consumer = watcherConsumer(watch);
    if (!consumer) return undefined; // a nats.js without it: test/nats/node-loss.test.ts says so
    let failures = 0;
    let probing = false;
    const timer = setInterval(() => {
      if (probing) return;
      probing = true;
      consumer.info().then(
        () => void (failures = 0),
        (err: unknown) => {
          // Twice, even "not found": nats.js remaking the consumer renames it a moment before it exists.
          if (++failures < 2) return;
          this.#log.warn(
            { err: (err as Error).message, revision: revision() },
            "the config watch lost its NATS consumer (its NATS node lost?); watching again from the next revision",
          );
          watch.stop();
        },
      ).finally(() => (probing = false));
    }, WATCHER_PROBE_MS);
    timer.unref();
    return timer;
  }

  #loaded(resolve: () => void): void {
    this.#ready = true;
    this.#publish();
    this.#log.info({ sources: this.#sources.size, destinations: this.#destinations.size }, "config loaded from the trackhook-config bucket");
    resolve();
  }

  /** Returns whether the entry changed the config. */
  #apply(entry: KvEntry): boolean {
    const key = parseConfigKey(entry.key);
    if (!key) {
      this.#log.warn({ key: entry.key }, "ignoring an unknown key in the config bucket");
      return false;
    }
    const { kind, namespace, name } = key;
    const id = `${namespace}/${name}`;
    const map = kind === "source" ? this.#sources : this.#destinations;
    if (entry.operation !== "PUT") return map.delete(id);
    let value: unknown;
    try {
      value = entry.json();
    } catch {
      this.#log.error({ key: entry.key }, "ignoring a config entry that is not JSON");
      this.noteLoad("rejected");
      return false;
    }
    const unknown = dropUnknownFields(kind, value);
    if (unknown.length > 0) {
      this.#log.warn({ key: entry.key, fields: unknown }, "config entry has fields this version does not know (written by a newer trackhook?); they are ignored");
    }
    const validate = kind === "source" ? validateCompiledSource : validateCompiledDestination;
    if (!validate(value)) {
      this.#log.error({ key: entry.key, problems: describeErrors(validate.errors) }, "ignoring an invalid config entry");
      this.noteLoad("rejected");
      return false;
    }
    (map as Map<string, unknown>).set(id, value);
    return true;
  }

  #publish(): void {
    const held = this.#held;
    const config: CompiledConfig = {
      sources: [...(held ? new Map([...held.sources, ...this.#sources]) : this.#sources).values()],
      destinations: [...(held ? new Map([...held.destinations, ...this.#destinations]) : this.#destinations).values()],
    };
    this.set(config);
  }

  /** The new bucket has had its entries written for REFILL_MS: what it lacks is gone for good. */
  #refilled(): void {
    const held = this.#held;
    if (!held) return;
    this.#held = undefined;
    const dropped = (before: Map<string, unknown>, now: Map<string, unknown>) => [...before.keys()].filter((id) => !now.has(id));
    this.#log.info({ droppedSources: dropped(held.sources, this.#sources), droppedDestinations: dropped(held.destinations, this.#destinations) }, "the config bucket made again is refilled; the config it holds is in effect");
    this.#publish();
  }

  override close(): void {
    if (this.#held) clearTimeout(this.#held.timer);
    this.#stopped = true;
    this.#stopWatch();
  }
}

/** How long a bucket made again must go without a new entry for the config the lost one held to stop counting. */
const REFILL_MS = 10_000;

/** How often a config watch's consumer is looked at (#probeWatcher). */
const WATCHER_PROBE_MS = 5_000;

type KvWatch = Awaited<ReturnType<KV["watch"]>>;

/**
 * The consumer behind a KV watch: nats.js keeps it as the iterator's `_data`, outside its public
 * types. Its info() asks for the consumer as it is now (nats.js renames it when it remakes it).
 */
function watcherConsumer(watch: KvWatch): { info(): Promise<unknown> } | undefined {
  const consumer = (watch as { _data?: { info?: unknown } })._data;
  return typeof consumer?.info === "function" ? (consumer as { info(): Promise<unknown> }) : undefined;
}

async function openWhenCreated(nc: NatsConnection, log: Logger, retryMs: number, stopped: () => boolean): Promise<KV> {
  const kvm = new Kvm(nc);
  for (let attempt = 0; ; attempt++) {
    try {
      const kv = await kvm.open(CONFIG_BUCKET);
      await kv.status(); // open() is lazy about the bucket's existence
      return kv;
    } catch (err) {
      if (stopped()) throw err;
      if (attempt % 5 === 0) {
        log.warn({ bucket: CONFIG_BUCKET, err: (err as Error).message }, "config bucket not there yet; is the operator running?");
      }
      await sleep(retryMs);
    }
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

const KNOWN_FIELDS = {
  source: new Set(Object.keys(CompiledSource.properties)),
  destination: new Set(Object.keys(CompiledDestination.properties)),
};

/**
 * Removes an entry's top-level fields this version does not know, and says which. In a rolling
 * upgrade (or a rollback) a newer operator may write a field an older ingest has never heard of:
 * refusing the whole entry would refuse its write key (401, which SDKs drop) and freeze the
 * entry at its last value, key rotations included.
 */
function dropUnknownFields(kind: "source" | "destination", value: unknown): string[] {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return [];
  const unknown = Object.keys(value).filter((field) => !KNOWN_FIELDS[kind].has(field));
  for (const field of unknown) delete (value as Record<string, unknown>)[field];
  return unknown;
}
