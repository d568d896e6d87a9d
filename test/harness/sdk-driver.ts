// Test harness for the SDK compatibility tests whose SDK runs in a process of its own (a Go binary,
// a JVM): the built driver, checked fresh against its sources, and one run of it that takes JSON
// instructions on stdin and prints a JSON report on stdout.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Json } from "./sdk.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

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

/**
 * A driver built with Maven from test/sdk/<lang> into .tools/<lang>-sdk/driver.jar
 * (scripts/tools-maven-sdk.sh): the SDK version its pom.xml pins, and one run of it in its own JVM.
 */
export function mavenDriver(lang: "java" | "kotlin"): { pinned: string | undefined; run<Report>(instructions: unknown): Promise<Report> } {
  const source = join(ROOT, "test", "sdk", lang);
  const jar = join(ROOT, ".tools", `${lang}-sdk`, "driver.jar");
  const hint = `run \`npm run tools\` (it builds the driver with scripts/tools-maven-sdk.sh ${lang}; Java >= 17 and Maven needed)`;
  return {
    pinned: new RegExp(`<segment\\.analytics\\.${lang}\\.version>([^<]+)<`).exec(readFileSync(join(source, "pom.xml"), "utf8"))?.[1],
    run: <Report>(instructions: unknown) =>
      runDriver<Report>("java", ["-jar", builtDriver(`analytics-${lang}`, jar, source, hint)], instructions, { timeoutMs: 20_000, spawnHint: "Java >= 17 must be on PATH" }),
  };
}

/**
 * One call a driver makes through its SDK's own API (test/sdk/<lang>), in the fields the SDKs
 * share; a driver that takes more extends it.
 */
export interface DriverCall {
  type: "identify" | "track" | "page" | "screen" | "group" | "alias";
  userId?: string;
  anonymousId?: string;
  event?: string;
  name?: string;
  groupId?: string;
  previousId?: string;
  properties?: Json;
  traits?: Json;
  integrations?: Json;
  context?: Json;
  timestamp?: string;
}

