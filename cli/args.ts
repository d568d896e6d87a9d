// Parsing of flag values shared by the commands.
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname } from "node:path";
import { parseDuration } from "../schema/mod.ts";
import { devLockPath, isRunning, readDevLock } from "./dev-lock.ts";

export class UsageError extends Error {
  readonly code = "TRACKHOOK_USAGE";
}

/**
 * Where services listen without --host: every address, IPv6 and IPv4 both ("::" is dual-stack),
 * so a pod of an IPv6-only cluster is reached too (found by a review: with 0.0.0.0 its probes and
 * Service never connected); "0.0.0.0" on a host without IPv6.
 */
export async function anyAddress(): Promise<string> {
  const probe = createServer();
  const ipv6 = await new Promise<boolean>((resolve) => {
    probe.once("error", () => resolve(false));
    probe.listen({ host: "::", port: 0 }, () => resolve(true));
  });
  if (ipv6) await new Promise((resolve) => probe.close(resolve));
  return ipv6 ? "::" : "0.0.0.0";
}

/**
 * Listens, turning what a user got wrong (a port in use, an address that is not this host's)
 * into a usage error (exit 2, one line) rather than a stack trace.
 */
export async function listenOrExplain(server: { listen(options: { host: string; port: number }): Promise<string>; close(): Promise<unknown> }, host: string, port: number): Promise<string> {
  try {
    return await server.listen({ host, port });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "EADDRINUSE" && code !== "EADDRNOTAVAIL" && code !== "ENOTFOUND" && code !== "EACCES") throw err;
    await server.close().catch(() => {});
    if (code === "EADDRINUSE") throw new UsageError(`${host}:${port} is already in use; choose another port with --port <n>`);
    if (code === "EACCES") throw new UsageError(`port ${port} needs privileges here; choose another with --port <n>`);
    throw new UsageError(`cannot listen on ${host}: not an address of this host (--host)`);
  }
}

const BYTE_UNITS: Record<string, number> = {
  "": 1, b: 1, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3, tib: 1024 ** 4,
};

/** "10GiB", "500MB", "1048576" -> bytes. */
export function parseBytes(flag: string, text: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(text.trim());
  const unit = match ? BYTE_UNITS[match[2]!.toLowerCase()] : undefined;
  if (!match || unit === undefined) throw new UsageError(`--${flag}: "${text}" is not a size (e.g. 10GiB, 500MB)`);
  return Math.round(Number(match[1]) * unit);
}

/**
 * --since: how long ago to read from. Longer ago than 1970 reads everything (found by a review:
 * "8760000h" found nothing, as NATS's nanosecond times wrapped, and longer ones threw), and "0"
 * is now, as in Go.
 */
export function sinceFlag(text: string): number {
  if (text.trim() === "0") return 0;
  return Math.min(durationFlag("since", text), Date.now());
}

export function durationFlag(flag: string, text: string): number {
  try {
    return parseDuration(text);
  } catch (err) {
    throw new UsageError(`--${flag}: ${(err as Error).message}`);
  }
}

export function integerFlag(flag: string, text: string, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < min || value > max) throw new UsageError(`--${flag}: "${text}" must be an integer from ${min} to ${max}`);
  return value;
}

export const listFlag = (text: string | undefined): string[] | undefined =>
  text === undefined ? undefined : text.split(",").map((s) => s.trim()).filter(Boolean);

/**
 * Schemes the NATS client dials; anything else (an http:// ingest URL by mistake) would only time
 * out. Not ws:// or wss://: the Node client does not speak WebSocket (found by a CLI review).
 */
const NATS_SCHEMES = ["nats", "tls"];

/**
 * The --nats URL, else TRACKHOOK_NATS_URL; for an admin command (`orDev`), else the NATS of the
 * `trackhook dev` running from this directory: its nats-server takes a new port at every start.
 */
export function natsUrl(values: { nats?: string | undefined }, { orDev = false }: { orDev?: boolean } = {}): string {
  const url = values.nats ?? process.env.TRACKHOOK_NATS_URL ?? (orDev ? devNatsUrl() : undefined);
  if (!url) {
    // A store left by an earlier `dev` here: the question is then whether it runs, not which flag.
    if (orDev && existsSync(dirname(devLockPath()))) {
      throw new UsageError("no `trackhook dev` is running in this directory (its store .trackhook/ is from an earlier run): start it (`npm run dev`), or give --nats <url> (or set TRACKHOOK_NATS_URL)");
    }
    throw new UsageError(`--nats <url> is required (or set TRACKHOOK_NATS_URL${orDev ? "; or run it where `trackhook dev` runs" : ""})`);
  }
  for (const server of url.split(",")) {
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(server.trim())?.[1]?.toLowerCase();
    const shown = server.trim().replace(/\/\/[^/@]*@/, "//");
    if (scheme !== undefined && !NATS_SCHEMES.includes(scheme)) {
      throw new UsageError(`--nats: "${shown}" is not a NATS URL (use nats://host:4222, tls://host:4222, or host:port)`);
    }
    // `localhost:4222x` made the NATS client throw a TypeError, printed with its stack.
    // An empty entry ("host:4222," or "nats://") made the NATS client throw a TypeError too.
    if (server.trim() === "" || /^[a-z]+:\/\/$/i.test(server.trim())) {
      throw new UsageError(`--nats: "${url}" has an empty server address (use nats://host:4222, or host:port, comma-separated)`);
    }
    if (!URL.canParse(scheme === undefined ? `nats://${server.trim()}` : server.trim())) {
      throw new UsageError(`--nats: "${shown}" is not a valid URL (use nats://host:4222, or host:port)`);
    }
  }
  return url;
}

/** The settings whose flag (`flagOf`) was not given: an existing stream keeps its own value for them. */
export function settingsLeftOut<S extends string>(values: Record<string, string | undefined>, flagOf: Record<S, string>): S[] {
  return (Object.keys(flagOf) as S[]).filter((setting) => values[flagOf[setting]] === undefined);
}

/** The NATS URL of the `trackhook dev` running from this directory with its default --data-dir. */
function devNatsUrl(): string | undefined {
  const lock = readDevLock(devLockPath());
  if (!lock?.natsUrl || !isRunning(lock.holder)) return undefined;
  process.stderr.write(`trackhook: using the NATS of the trackhook dev running here (pid ${lock.holder}): ${lock.natsUrl}\n`);
  return lock.natsUrl;
}
