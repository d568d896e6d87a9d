// Write-key authentication. Keys are never held in memory as text: the directory maps SHA-256
// digests to sources, so a lookup's timing depends only on the digest of what the caller sent,
// which tells an attacker nothing about any real key; the final comparison is constant-time.
import { createHash, timingSafeEqual } from "node:crypto";
import type { CompiledConfig, CompiledSource } from "../../schema/mod.ts";
import { errors } from "./errors.ts";

export class SourceDirectory {
  readonly #byDigest: Map<string, CompiledSource>;

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
    const source = this.#byDigest.get(digest.toString("hex"));
    if (!source) return undefined;
    return timingSafeEqual(Buffer.from(source.writeKeySha256, "hex"), digest) ? source : undefined;
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
  const candidates = [basicAuthUser(authorization), typeof bodyWriteKey === "string" && bodyWriteKey.length > 0 ? bodyWriteKey : undefined];
  let sawKey = false;
  for (const key of candidates) {
    if (key === undefined) continue;
    sawKey = true;
    const source = directory.find(key);
    if (source) return source;
  }
  throw sawKey ? errors.invalidWriteKey() : errors.missingWriteKey();
}
