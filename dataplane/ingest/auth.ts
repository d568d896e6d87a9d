// Write-key authentication. Keys are never held in memory as text: the directory maps SHA-256
// digests to sources. A lookup's timing therefore depends only on the digest of what the caller
// sent, which tells an attacker nothing about any real key (this is the constant-time property;
// comparing a digest with the entry found by that same digest would add nothing).
import { createHash } from "node:crypto";
import type { CompiledConfig, CompiledSource } from "../../schema/mod.ts";
import { errors } from "./errors.ts";

/** Authorization headers remembered per directory; SDKs send the same few over and over. */
const HEADER_CACHE_SIZE = 1024;

export class SourceDirectory {
  readonly #byDigest: Map<string, CompiledSource>;
  readonly #byHeader = new Map<string, CompiledSource>();

  constructor(config: CompiledConfig) {
    // A disabled source is absent: its key is refused exactly like an unknown one.
    this.#byDigest = new Map(config.sources.filter((s) => s.enabled).map((s) => [s.writeKeySha256, s]));
  }

  get size(): number {
    return this.#byDigest.size;
  }

  /** The enabled source whose write key this is, if any. */
  find(writeKey: string): CompiledSource | undefined {
    const digest = createHash("sha256").update(writeKey, "utf8").digest();
    return this.#byDigest.get(digest.toString("hex"));
  }

  /**
   * find() for the key of an Authorization header, remembering headers that matched. Only
   * known-good headers are kept, so the cache cannot be filled by guessing; a new config builds
   * a new directory, so a rotated key is forgotten with it.
   */
  findByHeader(authorization: string): CompiledSource | undefined {
    const cached = this.#byHeader.get(authorization);
    if (cached) return cached;
    const key = basicAuthUser(authorization);
    const source = key === undefined ? undefined : this.find(key);
    if (source) {
      if (this.#byHeader.size >= HEADER_CACHE_SIZE) this.#byHeader.clear();
      this.#byHeader.set(authorization, source);
    }
    return source;
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
export function authenticate(directory: SourceDirectory, authorization: string | undefined, bodyWriteKey: unknown): CompiledSource {
  const fromHeader = authorization ? directory.findByHeader(authorization) : undefined;
  if (fromHeader) return fromHeader;
  const bodyKey = typeof bodyWriteKey === "string" && bodyWriteKey.length > 0 ? bodyWriteKey : undefined;
  const fromBody = bodyKey === undefined ? undefined : directory.find(bodyKey);
  if (fromBody) return fromBody;
  throw bodyKey !== undefined || basicAuthUser(authorization) !== undefined ? errors.invalidWriteKey() : errors.missingWriteKey();
}
