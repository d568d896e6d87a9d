// The structured logger every component uses: pino, JSON lines, secrets redacted by path.
import { pino, type Logger as PinoLogger } from "pino";

export type Logger = PinoLogger;

/** Paths that may hold a secret in anything we log (headers of requests, config documents). */
export const REDACT_PATHS = [
  "req.headers.authorization",
  "headers.authorization",
  "*.writeKey",
  "writeKey",
  "*.sharedSecret",
  "sharedSecret",
  "*.additionalSharedSecrets",
  "additionalSharedSecrets",
];

/** @param options.destination where the JSON lines go (stdout by default; tests collect them). */
export function createLogger(options: { level?: string; name?: string; destination?: { write(line: string): void } } = {}): Logger {
  const settings = {
    level: options.level ?? (process.env.TRACKHOOK_LOG_LEVEL || "info"), // empty: unset
    name: options.name,
    redact: { paths: REDACT_PATHS, censor: "[redacted]" },
  };
  return options.destination ? pino(settings, options.destination) : pino(settings);
}
