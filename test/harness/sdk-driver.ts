// Test harness for the SDK compatibility tests whose SDK runs in a process of its own (a Go binary,
// a JVM): the built driver, checked fresh against its sources, and one run of it that takes JSON
// instructions on stdin and prints a JSON report on stdout.
import { spawn } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

/** Every file below `dir`, Maven's `target/` left out. */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? (e.name === "target" ? [] : sourceFiles(join(dir, e.name))) : [join(dir, e.name)],
  );
}

/**
 * `driver`, failing (never skipping: CI builds it) with `buildHint` when it is missing or older
 * than a file of `sourceDir`.
 */
export function builtDriver(what: string, driver: string, sourceDir: string, buildHint: string): string {
  if (!existsSync(driver)) throw new Error(`The ${what} driver ${driver} is missing: ${buildHint}.`);
  const built = statSync(driver).mtimeMs;
  const newer = sourceFiles(sourceDir).filter((f) => statSync(f).mtimeMs > built);
  if (newer.length > 0) throw new Error(`The ${what} driver ${driver} is older than ${newer.join(", ")}: ${buildHint}.`);
  return driver;
}

/**
 * Runs `command` with `instructions` as JSON on stdin and resolves with the JSON it prints. Async
 * on purpose: the ingest answering the SDK lives in the test's process. Killed after `timeoutMs`.
 */
export function runDriver<Report>(
  command: string,
  args: string[],
  instructions: unknown,
  options: { timeoutMs: number; env?: NodeJS.ProcessEnv; spawnHint?: string },
): Promise<Report> {
  const shown = [command, ...args].join(" ");
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"], timeout: options.timeoutMs, killSignal: "SIGKILL", ...(options.env ? { env: options.env } : {}) });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
    child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
    child.on("error", (err) => reject(new Error(`${shown}: ${err.message}${options.spawnHint ? ` (${options.spawnHint})` : ""}`)));
    child.on("close", (code, signal) => {
      if (code !== 0) return reject(new Error(`${shown} exited with ${code ?? signal}:\n${stderr}`));
      try {
        resolve(JSON.parse(stdout) as Report);
      } catch (err) {
        reject(new Error(`${shown} printed no JSON report (${String(err)}):\n${stdout}\n${stderr}`));
      }
    });
    child.stdin.end(JSON.stringify(instructions));
  });
}
