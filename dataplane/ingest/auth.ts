// Write-key authentication. The directory maps SHA-256 digests of keys to sources; the config
// holds no key as text (an Authorization header that matched is remembered as sent, see
// matchHeader). A lookup's timing therefore depends only on the digest of what the caller
// sent, which tells an attacker nothing about any real key (this is the constant-time property;
// comparing a digest with the entry found by that same digest would add nothing).
import { createHash } from "node:crypto";
import type { CompiledConfig, CompiledSource } from "../../schema/mod.ts";
import { errors } from "./errors.ts";

/** Authorization headers remembered per directory; SDKs send the same few over and over. */
const HEADER_CACHE_SIZE = 1024;

/** A source found by one of its write keys; `secret` and `key` name an additional key's Secret. */
export interface KeyMatch {
  readonly source: CompiledSource;
  readonly additional?: { readonly secret: string; readonly key: string };
}

export class SourceDirectory {
  readonly #byDigest = new Map<string, KeyMatch>();
  readonly #byHeader = new Map<string, KeyMatch>();
  readonly #size: number;

  constructor(config: CompiledConfig) {
    // A disabled source is absent: its keys are refused exactly like unknown ones.
    const enabled = config.sources.filter((s) => s.enabled);
    for (const source of enabled) {
      for (const { sha256, secretKey } of source.additionalWriteKeys ?? []) {
        const slash = secretKey.indexOf("/");
        this.#byDigest.set(sha256, { source, additional: { secret: secretKey.slice(0, slash), key: secretKey.slice(slash + 1) } });
      }
    }
    // Main keys last: should a bucket ever hold one key twice, it is someone's main key.
    for (const source of enabled) this.#byDigest.set(source.writeKeySha256, { source });
    this.#size = enabled.length;
  }

  /** Enabled sources. */
  get size(): number {
    return this.#size;
  }

  /** The enabled source whose write key (main or additional) this is, if any. */
  find(writeKey: string): CompiledSource | undefined {
    return this.match(writeKey)?.source;
  }

  match(writeKey: string): KeyMatch | undefined {
    const digest = createHash("sha256").update(writeKey, "utf8").digest();
    return this.#byDigest.get(digest.toString("hex"));
  }

  /**
   * match() for the key of an Authorization header, remembering headers that matched. Only
   * known-good headers are kept, so the cache cannot be filled by guessing; a new config builds
   * a new directory, so a rotated key is forgotten with it.
   */
  matchHeader(authorization: string): KeyMatch | undefined {
    const cached = this.#byHeader.get(authorization);
    if (cached) return cached;
    const key = basicAuthUser(authorization);
    const found = key === undefined ? undefined : this.match(key);
    if (found) {
      if (this.#byHeader.size >= HEADER_CACHE_SIZE) this.#byHeader.clear();
      this.#byHeader.set(authorization, found);
    }
    return found;
  }
}

/** The write key of a Basic Authorization header: the username, with or without the colon. */
export function basicAuthUser(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^\s*basic\s+([A-Za-z0-9+/=_-]+)\s*$/i.exec(header);
  if (!match) return undefined;
  const decoded = Buffer.from(match[1]!, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  const user = colon === -1 ? decoded : decoded.slice(0, colon);
  return user.length > 0 ? user : undefined;
}

/**
 * Finds the source of a request: the Basic username first (all SDKs that send a header), then the
 * body's `writeKey` (analytics.js, analytics-python, mobile SDKs).
 */
export function authenticate(directory: SourceDirectory, authorization: string | undefined, bodyWriteKey: unknown): KeyMatch {
  const fromHeader = authorization ? directory.matchHeader(authorization) : undefined;
  if (fromHeader) return fromHeader;
  const bodyKey = typeof bodyWriteKey === "string" && bodyWriteKey.length > 0 ? bodyWriteKey : undefined;
  const fromBody = bodyKey === undefined ? undefined : directory.match(bodyKey);
  if (fromBody) return fromBody;
  throw bodyKey !== undefined || basicAuthUser(authorization) !== undefined ? errors.invalidWriteKey() : errors.missingWriteKey();
}
