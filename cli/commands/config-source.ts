// Where `ingest` and `deliver` take their config from: YAML files (`--config`, local use) or the
// trackhook-config KV bucket the operator writes (`--config-from nats`, the default in a cluster).
import type { NatsConnection } from "@nats-io/transport-node";
import { FileConfigProvider, KvConfigProvider, type ConfigPart, type ConfigProvider } from "../../dataplane/config/mod.ts";
import type { Logger } from "../../dataplane/logging.ts";
import { UsageError } from "../args.ts";

export const configSourceFlags = {
  config: { type: "string" },
  "config-from": { type: "string" },
} as const;

export const configSourceHelp = `
  --config <file|dir>        Source, WebhookDestination and Secret YAML documents (reloaded on change)
  --config-from <file|nats>  nats: follow the trackhook-config bucket the operator writes
                             (default: file with --config, nats without)`;

export type ConfigFrom = { kind: "file"; path: string } | { kind: "nats" };

/** Checked before anything connects, so a wrong combination is a usage error. */
export function configFrom(values: { config?: string | undefined; "config-from"?: string | undefined }): ConfigFrom {
  const from = values["config-from"] ?? (values.config ? "file" : "nats");
  if (from === "nats") {
    if (values.config) throw new UsageError("--config and --config-from nats exclude each other");
    return { kind: "nats" };
  }
  if (from !== "file") throw new UsageError(`--config-from must be file or nats, not "${from}"`);
  if (!values.config) throw new UsageError("--config <file|dir> is required with --config-from file");
  return { kind: "file", path: values.config };
}

/** Files are read before anything connects, so invalid config fails at once (exit 2). */
export function openConfigFiles(from: ConfigFrom, log: Logger, part: ConfigPart): ConfigProvider | undefined {
  return from.kind === "file" ? new FileConfigProvider(from.path, log, { part }) : undefined;
}

/**
 * The file config already opened, or the bucket's part this component needs (waits for its
 * content): ingest reads the Sources only, delivery the destinations only.
 */
export async function openConfig(files: ConfigProvider | undefined, nc: NatsConnection, log: Logger, part: ConfigPart): Promise<ConfigProvider> {
  return files ?? KvConfigProvider.start(nc, log, { part });
}
