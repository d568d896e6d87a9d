// Where the data plane gets its compiled config from. Today: files (`--config`); the operator
// issue adds the trackhook-config KV bucket behind the same interface.
import { watch, type FSWatcher, statSync } from "node:fs";
import { basename, dirname } from "node:path";
import type { CompiledConfig } from "../../schema/mod.ts";
import type { Logger } from "../logging.ts";
import { configChanges } from "./changes.ts";
import { compileConfig, type ConfigPart } from "./compile.ts";
import { ConfigError } from "./errors.ts";
import { configFiles, loadDocuments, type ParsedFiles } from "./load.ts";

export interface ConfigProvider {
  current(): CompiledConfig;
  /** Called with every new config after the first; returns an unsubscribe function. */
  subscribe(listener: (config: CompiledConfig) => void): () => void;
  close(): void;
  /** How loading has gone, for metrics: providers that reload say so (ConfigHolder). */
  loading?(): ConfigLoading;
}

/** What `trackhook_config_*` report. */
export interface ConfigLoading {
  /** Reloads (or config-bucket entries) refused since start: the previous config stayed in force. */
  rejected: number;
  /** When the config in force was last read whole and valid (ms since the epoch). */
  loadedAt: number;
}

export function loadConfigFile(path: string, parsed?: ParsedFiles, part: ConfigPart = "all"): CompiledConfig {
  return readConfigFiles(path, parsed, part).config;
}

/**
 * The config of `part`, and whether the files hold any Source or WebhookDestination at all (a
 * delivery's part is empty of Sources even when they are there: found by a review, the last
 * destination taken out of delivery's files was refused as "the config now holds no Source").
 */
function readConfigFiles(path: string, parsed: ParsedFiles | undefined, part: ConfigPart): { config: CompiledConfig; holdsResources: boolean; passedOver: string[] } {
  const documents = loadDocuments(path, parsed);
  const holdsResources = documents.some(({ body }) => ["Source", "WebhookDestination"].includes((body as { kind?: unknown } | null)?.kind as string));
  const passedOver: string[] = [];
  return { config: compileConfig(documents, part, passedOver), holdsResources, passedOver };
}

/** A config that never changes (tests, one-shot commands). */
export function staticConfig(config: CompiledConfig): ConfigProvider {
  return { current: () => config, subscribe: () => () => {}, close: () => {} };
}

/** A config that is replaced as a whole with set(); listeners hear of each change. */
export class ConfigHolder implements ConfigProvider {
  #config: CompiledConfig;
  readonly #listeners = new Set<(config: CompiledConfig) => void>();
  readonly #loading: ConfigLoading = { rejected: 0, loadedAt: Date.now() };

  constructor(initial: CompiledConfig = { sources: [], destinations: [] }) {
    this.#config = initial;
  }

  current(): CompiledConfig {
    return this.#config;
  }

  subscribe(listener: (config: CompiledConfig) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  set(config: CompiledConfig): void {
    this.#config = config;
    this.#loading.loadedAt = Date.now();
    for (const listener of this.#listeners) listener(config);
  }

  loading(): ConfigLoading {
    return { ...this.#loading };
  }

  /** A reload or entry refused (the previous config stays), or one read fine that changed nothing. */
  protected noteLoad(outcome: "rejected" | "unchanged"): void {
    if (outcome === "rejected") this.#loading.rejected++;
    else this.#loading.loadedAt = Date.now();
  }

  close(): void {}
}

/** What a reload of `--config` came to, for those who tell a person (dev's activity lines). */
export type ConfigReload =
  /** `recovered`: the reload before it was refused. */
  | { readonly outcome: "applied"; readonly previous: CompiledConfig; readonly next: CompiledConfig; readonly recovered: boolean }
  /** The previous config stays in force. */
  | { readonly outcome: "refused"; readonly problems: readonly string[] }
  /** Fixed back to the config in force after a refused reload: nothing changes. */
  | { readonly outcome: "valid-again" };

/**
 * Loads `--config` and reloads it whenever a file changes. A broken edit is logged and the last
 * good config stays in force, so a typo never takes a running ingest down.
 */
export class FileConfigProvider extends ConfigHolder {
  #watcher: FSWatcher;
  #timer: NodeJS.Timeout | undefined;
  readonly path: string;
  private readonly log: Logger;
  /** The last reload failed: the next good one says so even when nothing changed. */
  #failing = false;
  /** A change waits this long after the last write seen and is read again (see reload). */
  readonly #settleMs: number;
  #settling: NodeJS.Timeout | undefined;
  /** Since when a change has waited to settle: files written without pause are read anyway after MAX_SETTLE_ROUNDS. */
  #changingSince: number | undefined;
  /** The files as the read that started the wait found them. */
  #settledFrom = "";
  /** The watched directory's identity: one replaced (rm -rf, mkdir) leaves a watch on the old one. */
  #dirId: string | undefined;
  /** Each config file as last parsed: a reload parses only the files whose text changed. */
  readonly #parsed: ParsedFiles;
  readonly #reloadListeners = new Set<(reload: ConfigReload) => void>();

  /** The part of the files this process runs on (see compileConfig). */
  readonly #part: ConfigPart;
  /** The files in force hold a Source or a WebhookDestination (of any part). */
  #holdsResources: boolean;
  /** Documents of the files in force that were checked and passed over (DeletionRequests), each said once. */
  #passedOver = new Set<string>();

  constructor(
    path: string,
    log: Logger,
    { part = "all", debounceMs = 200, settleMs = 1_000, pollMs = 2_000 }: { part?: ConfigPart; debounceMs?: number; settleMs?: number; pollMs?: number } = {},
  ) {
    const parsed: ParsedFiles = new Map();
    const first = readConfigFiles(path, parsed, part); // throws ConfigError: invalid config fails at start
    super(first.config);
    this.#holdsResources = first.holdsResources;
    this.#part = part;
    this.#parsed = parsed;
    this.path = path;
    this.log = log;
    this.#notePassedOver(first.passedOver);
    this.#settleMs = settleMs;
    const isDir = statSync(path).isDirectory();
    const dir = isDir ? path : dirname(path);
    const file = isDir ? undefined : basename(path);
    const schedule = () => {
      clearTimeout(this.#timer);
      this.#timer = setTimeout(() => this.reload(), debounceMs);
    };
    // Watch the directory, not the file: editors save by renaming a new file over the old one.
    const watchDir = () => {
      const watcher = watch(dir, (_event, name) => {
        if (!file || name === file) schedule();
      });
      watcher.on("error", () => {}); // the directory gone: the poll sees it come back
      watcher.unref();
      return watcher;
    };
    this.#watcher = watchDir();
    this.#dirId = identityOf(dir);
    // A watch does not see through symlinks: a file linked from elsewhere edited in place, or a
    // Kubernetes ConfigMap mount (its files are links through `..data`, swapped on update). What
    // the links point to is compared every few seconds too (found by a review: a rotated key in a
    // linked file never took effect). A directory replaced is watched anew (found by a review:
    // its watch was dead, and every change waited for this poll).
    this.#signature = filesSignature(path);
    this.#poll = setInterval(() => {
      const id = identityOf(dir);
      if (id !== undefined && id !== this.#dirId) {
        this.#watcher.close();
        this.#watcher = watchDir();
        this.#dirId = id;
      }
      if (filesSignature(path) !== this.#signature) schedule();
    }, pollMs);
    this.#poll.unref();
  }

  #signature: string;
  readonly #poll: NodeJS.Timeout;

  /** Hears every reload's outcome (applied ones reach subscribe()'s listeners too); returns an unsubscribe function. */
  onReload(listener: (reload: ConfigReload) => void): () => void {
    this.#reloadListeners.add(listener);
    return () => this.#reloadListeners.delete(listener);
  }

  #tell(reload: ConfigReload): void {
    for (const listener of this.#reloadListeners) listener(reload);
  }

  /** @param settled a second read, `settleMs` after the first that found a change. */
  reload(settled = false): void {
    // What this reload reads: the poll then fires only for a change made after it, not once more
    // for one the watch already brought (which logged and counted a broken edit twice).
    const signature = (this.#signature = filesSignature(this.path));
    clearTimeout(this.#settling);
    let next: CompiledConfig | undefined;
    let holdsResources = false;
    let passedOver: string[] = [];
    let problems: string[] = [];
    try {
      ({ config: next, holdsResources, passedOver } = readConfigFiles(this.path, this.#parsed, this.#part));
    } catch (err) {
      problems = err instanceof ConfigError ? err.problems : [String(err)];
    }
    const current = this.current();
    const unchanged = next !== undefined && JSON.stringify(next) === JSON.stringify(current);
    // A file read while being written (`gen > config.yaml`, a copy, a writer that pauses) may be
    // cut anywhere: documents missing (a Source's SDKs refused with 401, which they do not
    // retry), a key, secret or URL cut short (requests refused, deliveries signed wrong or sent
    // to the wrong URL and dead-lettered: found by a review), or not parse at all. A change takes
    // effect only when a read `settleMs` after the last write seen finds the files as the first
    // read did (found by a review: a write just before it was applied at once); a watch event
    // meanwhile starts the wait again.
    if (!unchanged && (!settled || signature !== this.#settledFrom)) {
      this.#changingSince ??= Date.now();
      if (Date.now() - this.#changingSince < MAX_SETTLE_ROUNDS * this.#settleMs) {
        this.#settledFrom = signature;
        this.#settling = setTimeout(() => this.reload(true), this.#settleMs);
        this.#settling.unref();
        return;
      }
    }
    this.#changingSince = undefined;
    if (next === undefined) {
      this.log.error({ path: this.path, problems }, "config reload failed; keeping the previous config");
      this.#failing = true;
      this.noteLoad("rejected");
      this.#tell({ outcome: "refused", problems });
      return;
    }
    if (!holdsResources && this.#holdsResources) {
      // Empty still at the second read: every Source (401 for every SDK) and destination (its
      // consumer, backlog and all) would go. Refused, said and counted.
      this.log.error({ path: this.path }, EMPTY_REFUSED);
      this.#failing = true;
      this.noteLoad("rejected");
      this.#tell({ outcome: "refused", problems: [EMPTY_REFUSED] });
      return;
    }
    this.#holdsResources = holdsResources;
    this.#notePassedOver(passedOver);
    const recovered = this.#failing;
    this.#failing = false;
    if (unchanged) {
      // Fixed back to what is running: say so, or the last word in the log stays the error.
      if (recovered) {
        this.log.info({ path: this.path }, "config valid again; unchanged from the config in use");
        this.#tell({ outcome: "valid-again" });
      }
      this.noteLoad("unchanged");
      return;
    }
    // Only the part this process compiles is counted: "sources: 0" from delivery read as unread Sources.
    const counts = { ...(this.#part !== "destinations" ? { sources: next.sources.length } : {}), ...(this.#part !== "sources" ? { destinations: next.destinations.length } : {}) };
    this.log.info({ path: this.path, ...counts, changes: configChanges(current, next) }, "config reloaded");
    this.set(next);
    this.#tell({ outcome: "applied", previous: current, next, recovered });
  }

  /** Says, once each, what the files hold that this process passes over. */
  #notePassedOver(notes: string[]): void {
    for (const note of notes) if (!this.#passedOver.has(note)) this.log.warn({ path: this.path }, note);
    this.#passedOver = new Set(notes);
  }

  override close(): void {
    clearInterval(this.#poll);
    clearTimeout(this.#timer);
    clearTimeout(this.#settling);
    this.#watcher.close();
  }
}

const EMPTY_REFUSED = "the config now holds no Source and no WebhookDestination; keeping the previous config (to run with none, stop the process)";

/** A change is applied at the latest after this many settle periods of files that keep changing. */
const MAX_SETTLE_ROUNDS = 10;

/** A directory's inode and birth time: a directory made anew often gets the inode of the one it replaced. */
function identityOf(path: string): string | undefined {
  try {
    const stat = statSync(path);
    return `${stat.ino}:${stat.birthtimeMs}`;
  } catch {
    return undefined;
  }
}

/** What the config files (through any symlinks) are now: their paths, sizes, times and inodes. */
function filesSignature(path: string): string {
  try {
    return configFiles(path)
      .map((file) => {
        const stat = statSync(file); // follows links
        return `${file}:${stat.ino}:${stat.size}:${stat.mtimeMs}`;
      })
      .join("\n");
  } catch {
    return ""; // gone for a moment (a swap under way): the next poll looks again
  }
}
