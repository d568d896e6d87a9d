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
];

export function createLogger(options: { level?: string; name?: string } = {}): Logger {
  return pino({
    level: options.level ?? process.env.TRACKHOOK_LOG_LEVEL ?? "info",
    name: options.name,
    redact: { paths: REDACT_PATHS, censor: "[redacted]" },
  });
}
