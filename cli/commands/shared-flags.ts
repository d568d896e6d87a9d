// Flags that `ingest` and `dev` share, and how they become options.
import type { ParseArgsConfig } from "node:util";
import { InvalidOptionsError, resolveIngestOptions, type IngestOptions } from "../../dataplane/ingest/mod.ts";
import type { EventsStreamSettings } from "../../dataplane/nats/mod.ts";
import { UsageError, durationFlag, integerFlag, listFlag, parseBytes, settingsLeftOut } from "../args.ts";

export const ingestFlags = {
  port: { type: "string" },
  host: { type: "string" },
  "cors-origins": { type: "string" },
  "trusted-proxies": { type: "string" },
  "public-url": { type: "string" },
  "keep-alive-timeout": { type: "string" },
  "stream-max-age": { type: "string" },
  "stream-max-bytes": { type: "string" },
  "stream-replicas": { type: "string" },
  "duplicate-window": { type: "string" },
  "log-level": { type: "string" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

export const ingestFlagsHelp = `
  --port <n>                 HTTP port (default 8080)
  --host <addr>              listen address (default: ingest every address, IPv6 and IPv4 (::); dev 127.0.0.1)
  --cors-origins <list>      comma-separated origins allowed by CORS (default *)
  --trusted-proxies <list>   proxies whose X-Forwarded-For sets the client IP (addresses or CIDRs)
  --public-url <url>         base URL SDKs use, for the settings endpoint (default: request Host)
  --keep-alive-timeout <dur> how long an idle connection is kept open (default 72s; 1s to 24h); must
                             exceed a reverse proxy's upstream idle timeout (see docs/operations.md)
  --stream-max-age <dur>     how long messages are kept (default 72h; must exceed retry windows)
  --stream-max-bytes <size>  stream disk budget; when full, ingest answers 503 (default 10GiB)
  --stream-replicas <n>      JetStream replicas (default 1)
  --duplicate-window <dur>   messageId deduplication window (default 10m; see docs/operations.md)
  --log-level <level>        trace, debug, info, warn, error (default info, or TRACKHOOK_LOG_LEVEL)`;

type Values = { [K in keyof typeof ingestFlags]?: string };

export function streamSettings(values: Values): EventsStreamSettings {
  const maxAgeMs = durationFlag("stream-max-age", values["stream-max-age"] ?? "72h");
  // Applied to the existing stream, a max age drops every older message at once.
  if (maxAgeMs < 60_000) throw new UsageError("--stream-max-age must be at least 1m (the stream drops every message older than it, at once)");
  const duplicateWindowMs = durationFlag("duplicate-window", values["duplicate-window"] ?? "10m");
  return {
    maxAgeMs,
    maxBytes: parseBytes("stream-max-bytes", values["stream-max-bytes"] ?? "10GiB"),
    // JetStream refuses a duplicate window longer than max_age.
    duplicateWindowMs: Math.min(duplicateWindowMs, maxAgeMs),
    replicas: integerFlag("stream-replicas", values["stream-replicas"] ?? "1", 1, 5),
    defaulted: settingsLeftOut(values, { maxAgeMs: "stream-max-age", maxBytes: "stream-max-bytes", duplicateWindowMs: "duplicate-window", replicas: "stream-replicas" }),
  };
}

/** Ingest options from flags, validated before anything connects: a bad flag is a usage error. */
export function ingestOptions(values: Values): IngestOptions {
  const origins = listFlag(values["cors-origins"]);
  const proxies = listFlag(values["trusted-proxies"]);
  const keepAlive = values["keep-alive-timeout"];
  const keepAliveTimeoutMs = keepAlive === undefined ? undefined : durationFlag("keep-alive-timeout", keepAlive);
  // A proxy that keeps its idle connections longer gets some closed under a request: a 502.
  if (keepAliveTimeoutMs !== undefined && (keepAliveTimeoutMs < 1000 || keepAliveTimeoutMs > 86_400_000)) {
    throw new UsageError(`--keep-alive-timeout: "${keepAlive}" must be from 1s to 24h (longer than the upstream idle timeout of any proxy in front)`);
  }
  try {
    return resolveIngestOptions({
      ...(origins ? { corsOrigins: origins } : {}),
      ...(proxies ? { trustedProxies: proxies } : {}),
      ...(values["public-url"] ? { publicUrl: values["public-url"] } : {}),
      ...(keepAliveTimeoutMs !== undefined ? { keepAliveTimeoutMs } : {}),
    });
  } catch (err) {
    if (err instanceof InvalidOptionsError) throw new UsageError(err.message);
    throw err;
  }
}
