// The lock file of `trackhook dev` in its data dir: who holds the store, the nats-server it started
// and that server's URL. `dev` writes it; the admin commands read the URL from it.
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** The lock file of a data dir (`dev --data-dir`, `.trackhook` by default). */
export const devLockPath = (dataDir = ".trackhook") => join(dataDir, "nats", "trackhook-dev.pid");

export interface DevLock {
  /** The `dev` process holding the store. */
  holder: number;
  /** The nats-server it started, once started. */
  natsServer?: number;
  natsUrl?: string;
}

/** The lock as written, or undefined when there is none. */
export function readDevLock(path: string): DevLock | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
  const [holder, natsServer, natsUrl] = text.trim().split(/\s+/);
  return { holder: Number(holder), ...(natsServer ? { natsServer: Number(natsServer) } : {}), ...(natsUrl ? { natsUrl } : {}) };
}

export const formatDevLock = (lock: DevLock): string => [lock.holder, lock.natsServer, lock.natsUrl].filter((f) => f !== undefined).join(" ");

/** Whether a process is alive (someone else's counts). */
export function isRunning(pid: number | undefined): boolean {
  if (pid === undefined || !Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
