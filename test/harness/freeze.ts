// Freezing a server with its sockets open (a paused VM, a partition), for tests of what clients
// do when nothing answers.
import { readFile, readdir } from "node:fs/promises";

/**
 * SIGSTOP, resolved once every thread of the process is stopped. kill() returns when the signal
 * is queued: one thread takes it and only then stops the others, so on a loaded machine another
 * thread, woken by a request sent just after, could still answer it (CI: a stream info was
 * answered by a "frozen" nats-server).
 */
export async function freeze(pid: number, timeoutMs = 5_000): Promise<void> {
  process.kill(pid, "SIGSTOP");
  const deadline = Date.now() + timeoutMs;
  while (!(await allStopped(pid))) {
    if (Date.now() > deadline) throw new Error(`process ${pid} not stopped ${timeoutMs} ms after SIGSTOP`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export function thaw(pid: number): void {
  process.kill(pid, "SIGCONT");
}

async function allStopped(pid: number): Promise<boolean> {
  const tasks = await readdir(`/proc/${pid}/task`);
  const states = await Promise.all(tasks.map(async (t) => {
    // The state follows the command name, which is in parentheses and may hold spaces.
    const stat = await readFile(`/proc/${pid}/task/${t}/stat`, "utf8").catch(() => ""); // a thread that ended meanwhile
    return stat === "" ? "T" : stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  }));
  return states.every((s) => s === "T" || s === "t");
}
