// The trackhook command as a user runs it: help, config errors at start, and `dev` serving the
// example config with its own nats-server, then stopping cleanly on SIGTERM.
import { gzipSync } from "node:zlib";
import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { connect as netConnect, type AddressInfo } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { LocalNatsServer, ensureStream, eventsStreamConfig, findNatsServer } from "../../dataplane/nats/mod.ts";
import { waitingServer } from "../../cli/commands/ingest.ts";
import { basic, post } from "../harness/ingest.ts";
import { freePort, freePorts } from "../harness/ports.ts";
import { tempDir } from "../harness/temp.ts";
import { selfSignedCert } from "../harness/tls.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const CLI = join(root, "cli", "main.ts");
const run = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { cwd: root, encoding: "utf8", timeout: 20_000 });

describe("trackhook CLI", () => {
  it("--help lists the commands", () => {
    const result = run("--help");
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/dev\s+Run trackhook on a laptop/);
    expect(result.stdout).toMatch(/ingest\s+Run the Segment-compatible Tracking API/);
  });

  it("only the operator loads the Kubernetes client (it costs every other command ~50 MB and ~0.4 s)", () => {
    // A resolve hook that reports each resolution of @kubernetes/client-node on stderr.
    const hook = `data:text/javascript,${encodeURIComponent(
      'import { registerHooks } from "node:module"; registerHooks({ resolve(s, c, next) { if (s.startsWith("@kubernetes/")) process.stderr.write("K8S_CLIENT_LOADED\\n"); return next(s, c); } });',
    )}`;
    const traced = (...args: string[]) => spawnSync(process.execPath, ["--import", hook, CLI, ...args], { cwd: root, encoding: "utf8", timeout: 20_000 });
    const ingestHelp = traced("ingest", "--help");
    expect(ingestHelp.status).toBe(0);
    expect(ingestHelp.stderr).not.toContain("K8S_CLIENT_LOADED");
    // The operator without a kubeconfig it can load: it got as far as loading the client.
    const operator = traced("operator", "--nats", "nats://127.0.0.1:1", "--kubeconfig", "/no/such/kubeconfig");
    expect(operator.stderr).toContain("K8S_CLIENT_LOADED");
    expect(operator.status).toBe(2);
  });

  it("<command> --help shows the command's flags", () => {
    const result = run("ingest", "--help");
    expect(result.status).toBe(0);
    expect(result.stdout).toContain("--nats <url>");
    expect(result.stdout).toContain("--duplicate-window");
  });

  it("an unknown command or flag is a usage error (exit 2)", () => {
    expect(run("frobnicate").status).toBe(2);
    const bad = run("dev", "--config", "examples", "--colour", "blue");
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--colour");
  });

  it("a flag that takes one value, given twice, is a usage error (found by a review: delete-user --source a --source b notified b only)", () => {
    const twice = run("delete-user", "--config", "examples", "--source", "default/website", "--source", "default/app", "--user-id", "u1", "--user-id", "u2", "--nats", "nats://127.0.0.1:1");
    expect(twice.status).toBe(2);
    expect(twice.stderr).toContain("--source was given more than once; it takes one value (run the command once per source)");
    expect(run("replay", "--destination", "a", "--destination", "b", "--nats", "nats://127.0.0.1:1").stderr).toContain("--destination was given more than once");
  });

  it("an invalid flag value is a usage error before anything connects", () => {
    const result = run("ingest", "--config", "examples", "--nats", "nats://127.0.0.1:1", "--trusted-proxies", "10.0.0.0/8,not-an-ip");
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('trustedProxies: "not-an-ip" is not an IP address or CIDR');
  });

  it("operator: --resync under 10s and a --watch-namespace that is not a namespace are usage errors (regression: 0s reconciled ~120 times a second, Bad_NS watched nothing)", () => {
    const resync = run("operator", "--nats", "nats://127.0.0.1:1", "--resync", "0s");
    expect(resync.status).toBe(2);
    expect(resync.stderr).toContain("--resync must be at least 10s");
    const ns = run("operator", "--nats", "nats://127.0.0.1:1", "--watch-namespace", "Bad_NS");
    expect(ns.status).toBe(2);
    expect(ns.stderr).toContain('--watch-namespace: "Bad_NS" is not a namespace name');
    const list = run("operator", "--nats", "nats://127.0.0.1:1", "--watch-namespace", "team-a,Bad_NS");
    expect(list.status).toBe(2);
    expect(list.stderr).toContain('--watch-namespace: "Bad_NS" is not a namespace name');
  });

  it("--version, `help <command>`, and a --log-level that is no level (a usage error, not a pino stack trace)", () => {
    expect(run("--version")).toMatchObject({ status: 0, stdout: expect.stringMatching(/^trackhook \d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?\n$/) });
    expect(run("help", "dev").stdout).toContain("--config <file|dir>");
    const level = run("ingest", "--config", "examples", "--nats", "nats://127.0.0.1:1", "--log-level", "verbose");
    expect(level.status).toBe(2);
    expect(level.stderr).toContain('--log-level: "verbose" is not one of');
    expect(level.stderr).not.toMatch(/\n\s+at /);
    // The chart's variable too (found by a CLI review: pino's stack trace).
    const fromEnv = spawnSync(process.execPath, [CLI, "ingest", "--config", "examples", "--nats", "nats://127.0.0.1:1"], { cwd: root, encoding: "utf8", timeout: 20_000, env: { ...process.env, TRACKHOOK_LOG_LEVEL: "verbose" } });
    expect(fromEnv.status).toBe(2);
    expect(fromEnv.stderr).toContain('TRACKHOOK_LOG_LEVEL: "verbose" is not one of');
    // ...where it is used only: --log-level wins, and the admin commands do not log.
    const env = { ...process.env, TRACKHOOK_LOG_LEVEL: "verbose" };
    const admin = spawnSync(process.execPath, [CLI, "dead-letters", "--destination", "a/b", "--nats", "nats://127.0.0.1:1"], { cwd: root, encoding: "utf8", timeout: 20_000, env });
    expect(admin.stderr).not.toContain("TRACKHOOK_LOG_LEVEL");
    const flagged = spawnSync(process.execPath, [CLI, "ingest", "--config", "examples", "--nats", "nats://127.0.0.1:1", "--port", "x", "--log-level", "info"], { cwd: root, encoding: "utf8", timeout: 20_000, env });
    expect(flagged.stderr).not.toContain("TRACKHOOK_LOG_LEVEL");
    expect(run("-V").stdout).toBe(run("--version").stdout);
  });

  it("a NATS password in a URL without a scheme is refused too, and never printed (regression: printed in the error)", () => {
    const result = run("tail", "--nats", "alice:s3cr3t@127.0.0.1:1");
    expect(result.status).toBe(2);
    expect(result.stderr).toContain("NATS URLs must not carry credentials");
    expect(result.stderr).not.toContain("s3cr3t");
  });

  it("flags are checked before waiting on NATS: a bad --port or a --stream-max-age under 1m fails at once", () => {
    for (const args of [["--port", "abc"], ["--port", "70000"], ["--stream-max-age", "10s"], ["--stream-max-age", "0s"]]) {
      const started = Date.now();
      const result = run("ingest", "--config", "examples", "--nats", "nats://127.0.0.1:1", ...args);
      expect(result.status, args.join(" ")).toBe(2);
      expect(Date.now() - started).toBeLessThan(10_000);
    }
  });

  it("--keep-alive-timeout outside 1s to 24h, or no duration, is a usage error before anything connects (found by a proxy review: the keep-alive timeout was fixed at 72 s)", () => {
    for (const value of ["0s", "500ms", "25h", "soon"]) {
      const result = run("ingest", "--config", "examples", "--nats", "nats://127.0.0.1:1", "--keep-alive-timeout", value);
      expect(result.status, value).toBe(2);
      expect(result.stderr, value).toContain("trackhook: --keep-alive-timeout: ");
      expect(result.stderr, value).not.toMatch(/\n\s+at /);
    }
    expect(run("ingest", "--config", "examples", "--nats", "nats://127.0.0.1:1", "--keep-alive-timeout", "25h").stderr).toContain('--keep-alive-timeout: "25h" must be from 1s to 24h');
    expect(run("dev", "--config", "examples", "--keep-alive-timeout", "0s").status).toBe(2);
  });

  it("operator with no Kubernetes config anywhere says so (regression: retried http://localhost for ever)", () => {
    const home = tempDir("home");
    const result = spawnSync(process.execPath, [CLI, "operator", "--nats", "nats://127.0.0.1:1"], {
      cwd: root, encoding: "utf8", timeout: 20_000, env: { ...process.env, HOME: home, KUBECONFIG: "", KUBERNETES_SERVICE_HOST: "" },
    });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain("no Kubernetes config found");
  });

  it("a --nats URL that is not a NATS URL (the ingest's http:// by mistake) is refused at once, not after a connect timeout", () => {
    const started = Date.now();
    const result = run("tail", "--nats", "http://user:pw@127.0.0.1:8080");
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('--nats: "http://127.0.0.1:8080" is not a NATS URL');
    expect(result.stderr).not.toContain("pw");
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("a --nats that is no URL at all is a usage error, not a TypeError's stack (found by a review)", () => {
    for (const command of ["tail", "dev"]) {
      const result = run(command, "--nats", "localhost:4222x", ...(command === "dev" ? ["--config", "examples/", "--port", "0"] : []));
      expect(result.status, command).toBe(2);
      expect(result.stderr).toContain('trackhook: --nats: "localhost:4222x" is not a valid URL (use nats://host:4222, or host:port)\n');
      expect(result.stderr).not.toContain("TypeError");
    }
  });

  it("an empty server in --nats, and ws:// (which the Node client cannot dial), are usage errors (found by a CLI review: a TypeError's stack)", () => {
    for (const [command, url] of [["ingest", "127.0.0.1:4222,"], ["tail", "nats://"], ["tail", " "], ["dev", "ws://127.0.0.1:4222"]] as const) {
      const result = run(command, "--nats", url, ...(command === "tail" ? [] : ["--config", "examples/", "--port", "0"]));
      expect(result.status, `${command} ${url}`).toBe(2);
      expect(result.stderr, `${command} ${url}`).toMatch(/^trackhook: --nats: .*(empty server address|is not a NATS URL)/m);
    }
  });

  it("invalid config fails at start, naming the document and field", () => {
    const dir = tempDir("cli");
    writeFileSync(join(dir, "bad.yaml"), "apiVersion: trackhook.io/v1alpha1\nkind: Source\nmetadata: { name: web }\nspec: { writeKeySecretRef: { name: k } }\n");
    const result = run("ingest", "--config", dir, "--nats", "nats://127.0.0.1:1");
    expect(result.status).toBe(2);
    expect(result.stderr).toContain(`${join(dir, "bad.yaml")}, document 1 (Source web): spec.writeKeySecretRef.key: is required`);
  });

  it("dev serves examples/ with its own nats-server and stops on SIGTERM", async () => {
    const dataDir = tempDir("dev");
    const child = spawn(process.execPath, [CLI, "dev", "--config", "examples/", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"], { cwd: root });
    let stderr = "";
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`dev did not start:\n${stderr}`)), 20_000);
        child.stderr.on("data", () => {
          const match = /ingest\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(stderr);
          if (match) {
            clearTimeout(timer);
            resolve(match[1]!);
          }
        });
      });
      expect(stderr).toContain("curl -u \"$WRITE_KEY:\"");
      // The lines it prints for another terminal work as printed: the admin commands reach its NATS.
      await expect.poll(() => stderr, { timeout: 5_000 }).toMatch(/^ {2}alias trackhook=.*$/m);
      const lines = ["export TRACKHOOK_NATS_URL=", "alias trackhook="].map((start) => stderr.split("\n").find((l) => l.trim().startsWith(start))!.trim());
      const other = spawnSync("bash", ["-c", `shopt -s expand_aliases\n${lines.join("\n")}\ntrackhook dead-letters --destination nobody`], { encoding: "utf8", timeout: 20_000 });
      expect([other.status, other.stdout]).toEqual([0, ""]);
      expect(other.stderr).toMatch(/^no dead letters for default\/nobody; no WebhookDestination of that name/);
      const res = await post(`${url}/v1/track`, { userId: "user-1", event: "Signed Up" }, { headers: { authorization: basic("dev-write-key") } });
      expect(res).toMatchObject({ status: 200, json: { success: true } });
      // One /metrics for everything dev runs.
      const metricsText = await (await fetch(`${url}/metrics`)).text();
      expect(metricsText).toContain("trackhook_ingest_messages_total");
      expect(metricsText).toContain("# TYPE trackhook_delivery_messages_total counter");
      expect(metricsText.match(/^# TYPE process_cpu_seconds_total /gm)).toHaveLength(1);
      // A second dev on the same data dir would run a second nats-server on the same store.
      const second = run("dev", "--config", "examples/", "--port", "0", "--data-dir", dataDir);
      expect(second.status).toBe(2);
      expect(second.stderr).toContain(`another trackhook dev (pid ${child.pid}) uses ${dataDir}`);
    } finally {
      child.kill("SIGTERM");
    }
    expect(await exited).toBe(0);
    // Stopped, it leaves the data dir to the next one.
    expect(existsSync(join(dataDir, "nats", "trackhook-dev.pid"))).toBe(false);
  });
});

describe("trackhook dev after a crash or a closed terminal (found by a review: each left its nats-server running, and the next dev started a second one on the same store)", () => {
  /** Starts dev on a data dir and waits until it serves; its output, and its nats-server's pid. */
  async function startDev(dataDir: string) {
    const child = spawn(process.execPath, [CLI, "dev", "--config", "examples/", "--port", "0", "--data-dir", dataDir], { cwd: root });
    let output = "";
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    child.stdout.on("data", (c: Buffer) => (output += c.toString()));
    const exited = new Promise<void>((resolve) => child.on("close", () => resolve()));
    await expect.poll(() => output, { timeout: 20_000 }).toMatch(/trackhook dev is running/);
    return { child, exited, output: () => output };
  }
  it("kill -9: the next dev stops the nats-server left running, and says so", async () => {
    const dataDir = tempDir("dev");
    const first = await startDev(dataDir);
    const [left] = natsServersOn(dataDir);
    expect(left).toBeGreaterThan(0);
    first.child.kill("SIGKILL");
    await first.exited;
    expect(natsServersOn(dataDir)).toEqual([left]); // a SIGKILLed process cannot stop its child
    const second = await startDev(dataDir);
    try {
      expect(second.output()).toContain("stopped the nats-server a trackhook dev that did not exit cleanly left running on this store");
      const running = natsServersOn(dataDir);
      expect(running).toHaveLength(1);
      expect(running).not.toContain(left);
    } finally {
      second.child.kill("SIGTERM");
      await second.exited;
    }
    expect(natsServersOn(dataDir)).toEqual([]);
  }, 60_000);

  it("the admin commands run where dev runs find its NATS without --nats (found by a review: its port changes at every start)", async () => {
    const here = tempDir("here");
    const env = { ...process.env };
    delete env.TRACKHOOK_NATS_URL;
    const child = spawn(process.execPath, [CLI, "dev", "--config", join(root, "examples"), "--port", "0"], { cwd: here, env });
    let output = "";
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    const exited = new Promise<void>((resolve) => child.on("close", () => resolve()));
    try {
      await expect.poll(() => output, { timeout: 20_000 }).toMatch(/trackhook dev is running/);
      const admin = spawnSync(process.execPath, [CLI, "dead-letters", "--destination", "nobody"], { cwd: here, env, encoding: "utf8", timeout: 20_000 });
      expect(admin.stderr).toMatch(/using the NATS of the trackhook dev running here \(pid \d+\): nats:\/\/127\.0\.0\.1:\d+/);
      expect(admin.stderr).toContain("no dead letters for default/nobody");
      expect(admin.status).toBe(0);
    } finally {
      child.kill("SIGTERM");
      await exited;
    }
    // Once it has stopped, it says so, and asks for --nats (found by a review: only the flag was asked for).
    const after = spawnSync(process.execPath, [CLI, "dead-letters", "--destination", "nobody"], { cwd: here, env, encoding: "utf8", timeout: 20_000 });
    expect([after.status, after.stderr]).toEqual([2, "trackhook: no `trackhook dev` is running in this directory (its store .trackhook/ is from an earlier run): start it (`npm run dev`), or give --nats <url> (or set TRACKHOOK_NATS_URL)\n"]);
    // Where no dev ever ran, the flag.
    const elsewhere = spawnSync(process.execPath, [CLI, "dead-letters", "--destination", "nobody"], { cwd: tempDir("elsewhere"), env, encoding: "utf8", timeout: 20_000 });
    expect([elsewhere.status, elsewhere.stderr]).toEqual([2, "trackhook: --nats <url> is required (or set TRACKHOOK_NATS_URL; or run it where `trackhook dev` runs)\n"]);
  }, 40_000);

  it("SIGHUP (the terminal closed) stops dev and its nats-server cleanly", async () => {
    const dataDir = tempDir("dev");
    const dev = await startDev(dataDir);
    dev.child.kill("SIGHUP");
    await dev.exited;
    expect(dev.child.exitCode).toBe(0);
    expect(natsServersOn(dataDir)).toEqual([]);
    expect(existsSync(join(dataDir, "nats", "trackhook-dev.pid"))).toBe(false);
  }, 40_000);
});

describe("a second signal during shutdown", () => {
  it("exits 128 + the signal's number (it was 1), and dev's nats-server goes with it: dev waiting on a webhook that does not answer", async () => {
    const hanging = createServer(() => {}); // takes the request, never answers
    await new Promise<void>((resolve) => hanging.listen(0, "127.0.0.1", resolve));
    const dir = tempDir("dev");
    mkdirSync(join(dir, "config"));
    writeFileSync(join(dir, "config", "all.yaml"), `${readFileSync(join(root, "examples", "dev.yaml"), "utf8")}---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: slow }
spec: { sources: [website], urls: ["http://127.0.0.1:${(hanging.address() as AddressInfo).port}/hook"], timeout: 30s }
`);
    const dev = spawnCli("dev", "--config", join(dir, "config"), "--port", "0", "--data-dir", join(dir, "data"));
    try {
      const [, url] = await dev.waitFor(/ingest\s+(http:\/\/127\.0\.0\.1:\d+)/, 20_000);
      const requested = new Promise((resolve) => hanging.once("request", resolve));
      expect((await post(`${url}/v1/track`, { userId: "u", event: "Slow" }, { headers: { authorization: basic("dev-write-key") } })).status).toBe(200);
      await requested;
      dev.child.kill("SIGTERM");
      await dev.waitFor(/shutting down: finishing in-flight work/, 5_000); // the webhook request holds it
      dev.child.kill("SIGINT");
      expect(await dev.exited).toBe(130);
      expect(dev.output()).toContain("second signal: exiting now");
      expect(natsServersOn(join(dir, "data"))).toEqual([]);
    } finally {
      dev.child.kill("SIGKILL");
      hanging.closeAllConnections();
      hanging.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("trackhook dev failing to start", () => {
  it("a --data-dir it cannot make is a usage error naming the directory and the way out, not a stack trace (found by a packaging review)", () => {
    const result = run("dev", "--config", "examples", "--data-dir", "/dev/null/trackhook");
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/^trackhook: cannot make \/dev\/null\/trackhook\/nats for nats-server's store \(ENOTDIR\): run from a directory you can write, or pass --data-dir <dir>/m);
    expect(result.stderr).not.toContain("    at ");
  });

  it("reports a port in use clearly and leaves no nats-server behind", async () => {
    const { createServer } = await import("node:net");
    const blocker = createServer().listen(0, "127.0.0.1");
    await new Promise((r) => blocker.once("listening", r));
    const port = (blocker.address() as { port: number }).port;
    const dataDir = tempDir("dev");
    try {
      const result = run("dev", "--config", "examples/", "--port", String(port), "--data-dir", dataDir, "--log-level", "warn");
      expect(result.status).toBe(2);
      expect(result.stderr).toContain(`127.0.0.1:${port} is already in use; choose another port with --port <n>`);
      // The nats-server it started (the only process with this store directory) must be gone.
      const leftovers = spawnSync("pgrep", ["-f", "--", `-sd ${join(dataDir, "nats")}`], { encoding: "utf8" });
      expect(leftovers.status, leftovers.stderr).toBe(1); // pgrep: 1 = no process matched, 2 = usage error
      expect(leftovers.stdout.trim()).toBe("");
    } finally {
      blocker.close();
    }
  });
});

describe("version", () => {
  it("the version sent in User-Agent is package.json's", async () => {
    const { VERSION } = await import("../../dataplane/version.ts");
    const pkg = JSON.parse((await import("node:fs")).readFileSync(join(root, "package.json"), "utf8")) as { version: string };
    expect(VERSION).toBe(pkg.version);
  });
});

/** The pids of nats-servers that dev started on this data dir. */
const natsServersOn = (dataDir: string) =>
  spawnSync("pgrep", ["-f", "--", `-sd ${join(dataDir, "nats")}`], { encoding: "utf8" }).stdout.trim().split("\n").filter(Boolean).map(Number);

/** A child `trackhook` whose output (pino lines on stdout, messages on stderr) a test can wait on. */
function spawnCli(...args: string[]) {
  return spawnCliWithEnv({}, ...args);
}

function spawnCliWithEnv(env: Record<string, string>, ...args: string[]) {
  const child = spawn(process.execPath, [CLI, ...args], { cwd: root, env: { ...process.env, ...env } });
  let output = "";
  child.stdout.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr.on("data", (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  return {
    child,
    exited,
    output: () => output,
    async waitFor(pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const match = pattern.exec(output);
        if (match) return match;
        if (Date.now() > deadline) throw new Error(`no ${pattern} within ${timeoutMs} ms; output:\n${output}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

/** A nats-server of the test's own; its JetStream storage limited to `maxFileStore` if given. */
async function ownNats(maxFileStore?: string): Promise<LocalNatsServer> {
  const storeDir = tempDir("nats");
  if (!maxFileStore) return LocalNatsServer.start({ storeDir });
  const conf = join(storeDir, "nats.conf");
  writeFileSync(conf, `jetstream { max_file_store: ${maxFileStore} }\n`);
  return LocalNatsServer.start({ storeDir, args: ["-c", conf] });
}

/** `trackhook ingest` on examples/ against `server`, once it listens. */
async function ingestOn(server: LocalNatsServer, ...flags: string[]) {
  const port = await freePort();
  const ingest = spawnCli("ingest", "--config", "examples/", "--nats", server.url, "--port", String(port), "--host", "127.0.0.1", ...flags);
  await ingest.waitFor(/"msg":"ingest listening"/, 15_000);
  return {
    ingest,
    track: () => post(`http://127.0.0.1:${port}/v1/track`, { userId: "u", event: "e" }, { headers: { authorization: basic("dev-write-key") } }),
    async stop() {
      ingest.child.kill("SIGTERM");
      await ingest.exited;
    },
  };
}

/**
 * `trackhook ingest` (with `flags`) on a nats-server of its own (of `maxFileStore`), and a client
 * connection to that server for the test's own doings; all stopped after `use`.
 */
async function withOwnIngest(
  options: { maxFileStore?: string; flags?: string[] },
  use: (env: { nc: NatsConnection; running: Awaited<ReturnType<typeof ingestOn>> }) => Promise<void>,
): Promise<void> {
  const server = await ownNats(options.maxFileStore);
  const nc = await connect({ servers: server.url });
  const running = await ingestOn(server, ...(options.flags ?? []));
  try {
    await use({ nc, running });
  } finally {
    await nc.close();
    await running.stop();
    await server.stop();
  }
}

describe("ingest's waiting server", () => {
  it("answers a request that arrives while it closes (the Tracking API taking the port) 503 storage_unavailable in the catalogue's shape (found by a proxy review: Fastify's {\"error\":\"Service Unavailable\"} without success or code)", async () => {
    const waiting = waitingServer(() => "the TRACKHOOK_EVENTS stream", () => undefined);
    const { port } = new URL(await waiting.listen({ host: "127.0.0.1", port: 0 }));
    // A request begun before close(): its connection is not idle, so close() leaves it open.
    const socket = netConnect(Number(port), "127.0.0.1");
    await once(socket, "connect");
    let answer = "";
    socket.on("data", (chunk: Buffer) => (answer += chunk.toString()));
    socket.write("POST /v1/track HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n");
    await new Promise((r) => setTimeout(r, 100));
    const closed = waiting.close();
    socket.write("content-length: 2\r\n\r\n{}");
    await once(socket, "end");
    await closed;
    expect(answer).toMatch(/^HTTP\/1\.1 503 /);
    expect(answer.toLowerCase()).toContain("connection: close");
    expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4))).toMatchObject({ success: false, code: "storage_unavailable" });
  });
});

describe("trackhook and a NATS that comes and goes", () => {
  it("ingest waiting for its events stream (a NATS whose JetStream is not up) keeps answering /healthz, says what it waits for, and starts once it is (found by a review: nothing listened meanwhile)", { timeout: 40_000 }, async () => {
    const [port, httpPort] = await freePorts(2);
    const storeDir = tempDir("nats");
    // NATS without JetStream first: every JetStream request has no responders.
    const plain = spawn(findNatsServer(), ["-a", "127.0.0.1", "-p", String(port)], { stdio: "ignore" });
    const ingest = spawnCli("ingest", "--config", "examples/", "--nats", `nats://127.0.0.1:${port}`, "--port", String(httpPort), "--host", "127.0.0.1");
    const origin = `http://127.0.0.1:${httpPort}`;
    let server: LocalNatsServer | undefined;
    try {
      await ingest.waitFor(/making stream TRACKHOOK_EVENTS: JetStream does not answer \(a server just restarted is still starting it; one run without -js, or a jetstream \{\} block, never will\)/, 15_000);
      expect((await fetch(`${origin}/healthz`)).status).toBe(200);
      expect(await (await fetch(`${origin}/readyz`)).json()).toEqual({ status: "not_ready", reason: "starting: waiting for the TRACKHOOK_EVENTS stream" });
      expect((await fetch(`${origin}/v1/track`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" })).status).toBe(503);
      plain.kill();
      await new Promise((r) => plain.once("exit", r));
      server = await LocalNatsServer.start({ storeDir, port }); // the same NATS, JetStream up
      await ingest.waitFor(/"msg":"ingest listening"/, 20_000);
      expect((await fetch(`${origin}/readyz`)).status).toBe(200);
    } finally {
      plain.kill();
      ingest.child.kill("SIGTERM");
      await ingest.exited;
      await server?.stop();
    }
  });


  it("ingest started before NATS says every 10 s that it is waiting and is live but not ready meanwhile (found by a review: nothing listened, so probes restarted it), starts when NATS comes, and a second ingest with another --stream-max-age logs the change it makes", async () => {
    const port = await freePort();
    const httpPort = await freePort();
    const storeDir = tempDir("nats");
    const nats = `nats://127.0.0.1:${port}`;
    const first = spawnCli("ingest", "--config", "examples/", "--nats", nats, "--port", String(httpPort), "--host", "127.0.0.1");
    const origin = `http://127.0.0.1:${httpPort}`;
    let second: ReturnType<typeof spawnCli> | undefined;
    let server: LocalNatsServer | undefined;
    try {
      const waiting = await first.waitFor(/"waitedSeconds":(\d+).*"msg":"NATS does not answer yet; still trying \(is the URL right\?\)"/, 15_000);
      expect(Number(waiting[1])).toBeGreaterThanOrEqual(9);
      expect((await fetch(`${origin}/healthz`)).status).toBe(200);
      const notReady = await fetch(`${origin}/readyz`);
      expect(notReady.status).toBe(503);
      expect(await notReady.json()).toEqual({ status: "not_ready", reason: "starting: waiting for NATS" });
      const early = await fetch(`${origin}/v1/track`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ userId: "u", event: "e" }) });
      expect(early.status).toBe(503); // which SDKs retry
      expect(early.headers.get("retry-after")).toBe("5");
      expect(await early.json()).toMatchObject({ success: false, code: "storage_unavailable" });
      // Whatever the body: a gzip batch (the Python SDK's) or a broken one is not a 4xx, which SDKs would not retry (found by a review).
      const gzipped = await fetch(`${origin}/v1/batch`, { method: "POST", headers: { "content-type": "application/json", "content-encoding": "gzip" }, body: gzipSync(JSON.stringify({ batch: [] })) });
      expect(gzipped.status).toBe(503);
      expect((await fetch(`${origin}/v1/track`, { method: "POST", headers: { "content-type": "application/json" }, body: "{broken" })).status).toBe(503);
      expect(await (await fetch(`${origin}/metrics`)).text()).toContain("trackhook_nats_connected 0");
      server = await LocalNatsServer.start({ storeDir, port });
      await first.waitFor(/"msg":"ingest listening"/, 15_000);
      expect((await fetch(`${origin}/readyz`)).status).toBe(200);
      expect(first.output()).not.toContain("changing the events stream's settings");

      second = spawnCli("ingest", "--config", "examples/", "--nats", nats, "--port", "0", "--host", "127.0.0.1", "--stream-max-age", "2h");
      await second.waitFor(/"msg":"ingest listening"/, 15_000);
      const line = second.output().split("\n").find((l) => l.includes("changing the events stream's settings"));
      expect(line, second.output()).toBeDefined();
      expect((JSON.parse(line!) as { changes: unknown }).changes).toEqual([{ setting: "max_age", from: 72 * 3_600e9, to: 2 * 3_600e9 }]);
    } finally {
      first.child.kill("SIGTERM");
      second?.child.kill("SIGTERM");
      await Promise.all([first.exited, second?.exited]);
      await server?.stop();
    }
  }, 60_000);

  it("ingest against a NATS whose TLS certificate it does not trust, or that is for another name, says so while it waits, with the error (found by a VM install review: it said only 'does not answer yet'), and connects with TRACKHOOK_NATS_CA and the certificate's name", async () => {
    const dir = tempDir("nats-tls");
    const { key, cert } = selfSignedCert("DNS:localhost");
    writeFileSync(join(dir, "cert.pem"), cert);
    writeFileSync(join(dir, "key.pem"), key);
    const server = await LocalNatsServer.start({ storeDir: dir, args: ["--tls", "--tlscert", join(dir, "cert.pem"), "--tlskey", join(dir, "key.pem")] });
    const start = async (env: Record<string, string>, host: string) =>
      spawnCliWithEnv(env, "ingest", "--config", "examples/", "--nats", `tls://${host}:${server.port}`, "--port", String(await freePort()), "--host", "127.0.0.1");
    const trust = { TRACKHOOK_NATS_CA: join(dir, "cert.pem") };
    try {
      const untrusting = await start({}, "localhost");
      const byAddress = await start(trust, "127.0.0.1");
      try {
        await untrusting.waitFor(/"level":50,.*"err":"DEPTH_ZERO_SELF_SIGNED_CERT: self-signed certificate.*"msg":"NATS's TLS certificate is not trusted; still trying \(set TRACKHOOK_NATS_CA/, 15_000);
        await byAddress.waitFor(/"level":50,.*"err":"ERR_TLS_CERT_ALTNAME_INVALID: .*127\.0\.0\.1 is not in the cert's list.*"msg":"NATS's TLS certificate is not valid for the name or address in the URL/, 15_000);
      } finally {
        untrusting.child.kill("SIGKILL");
        byAddress.child.kill("SIGKILL");
      }
      const trusting = await start(trust, "localhost");
      await trusting.waitFor(/"msg":"ingest listening"/, 15_000);
      expect(trusting.output()).not.toMatch(/certificate is not/);
      trusting.child.kill("SIGTERM");
      expect(await trusting.exited).toBe(0);
    } finally {
      await server.stop();
    }
  });

  it("ingest makes the events stream again when it is lost (deleted, or NATS lost its store), saying what was lost (regression: 503 to everything until restarted)", async () => {
    await withOwnIngest({}, async ({ nc, running }) => {
      expect((await running.track()).status).toBe(200);
      await (await jetstreamManager(nc)).streams.delete("TRACKHOOK_EVENTS");
      const started = performance.now();
      expect(await running.track()).toMatchObject({ status: 503, json: { code: "storage_unavailable" } });
      // At once, from NATS's "no responders", not after the 5 s publish timeout (a mutation audit
      // could make it wait without this test noticing).
      expect(performance.now() - started).toBeLessThan(2_000);
      await running.ingest.waitFor(/"stream":"TRACKHOOK_EVENTS".*"msg":"the stream was missing \(deleted, or nats-server lost its store\) and is made again; what it held is gone/, 15_000);
      expect((await running.track()).status).toBe(200);
    });
  }, 60_000);

  it("ingest without --host answers on IPv6 and IPv4 both, and stores an IPv4 client's address as IPv4 (found by a review: IPv6-only clusters never reached 0.0.0.0)", async () => {
    const server = await ownNats();
    const nc = await connect({ servers: server.url });
    const port = await freePort();
    const ingest = spawnCli("ingest", "--config", "examples/", "--nats", server.url, "--port", String(port));
    try {
      await ingest.waitFor(/"msg":"ingest listening"/, 15_000);
      const headers = { authorization: basic("dev-write-key") };
      for (const host of ["127.0.0.1", "[::1]"]) {
        expect((await post(`http://${host}:${port}/v1/track`, { userId: "u", event: `from ${host}`, context: { direct: true } }, { headers })).status).toBe(200);
      }
      const jsm = await jetstreamManager(nc);
      const stored = [];
      for (let seq = 1; seq <= 2; seq++) stored.push((await jsm.streams.getMessage("TRACKHOOK_EVENTS", { seq }))!.json<{ event: string; context: { ip: string } }>());
      expect(stored.map((m) => [m.event, m.context.ip])).toEqual([["from 127.0.0.1", "127.0.0.1"], ["from [::1]", "::1"]]);
    } finally {
      ingest.child.kill("SIGTERM");
      await ingest.exited;
      await nc.close();
      await server.stop();
    }
  }, 60_000);

  it("ingest keeps idle connections open for --keep-alive-timeout, and says so in Keep-Alive (found by a proxy review: fixed at 72 s, shorter than a GCP load balancer's 600 s, whose reused connections were closed under a POST: 502)", async () => {
    await withOwnIngest({ flags: ["--keep-alive-timeout", "650s"] }, async ({ running }) => {
      const res = await running.track();
      expect(res.status).toBe(200);
      expect(res.headers.get("keep-alive")).toBe("timeout=650");
    });
  }, 60_000);

  it("a stream that does not fit NATS's storage is a clear error naming the stream and the fix (regression: a JetStream stack trace, crash-looping)", async () => {
    const server = await ownNats("50MB");
    try {
      const ingest = spawnCli("ingest", "--config", "examples/", "--nats", server.url, "--port", "0", "--host", "127.0.0.1");
      expect(await ingest.exited).toBe(2);
      expect(ingest.output()).toMatch(/trackhook: nats-server refused TRACKHOOK_EVENTS with max_bytes 10737418240 \(10\.00 GiB\).*max_file_store.*--stream-max-bytes/);
      expect(ingest.output()).not.toMatch(/\n\s+at /);
      // deliver's dead-letter stream (1 GiB) the same way.
      const deliver = spawnCli("deliver", "--config", "examples/", "--nats", server.url, "--port", "0", "--host", "127.0.0.1");
      expect(await deliver.exited).toBe(2);
      expect(deliver.output()).toMatch(/trackhook: nats-server refused TRACKHOOK_DLQ with max_bytes 1073741824 \(1\.00 GiB\)/);
    } finally {
      await server.stop();
    }
  }, 30_000);

  it("NATS out of JetStream storage (another stream filled it) is 503 storage_full, not storage_unavailable (regression: looked like an outage)", async () => {
    await withOwnIngest({ maxFileStore: "20MB", flags: ["--stream-max-bytes", "8MiB"] }, async ({ nc, running }) => {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: "FILLER", subjects: ["filler.>"] }); // no max_bytes: takes what is free
      const js = jsm.jetstream();
      const chunk = new Uint8Array(512 * 1024);
      for (let i = 0; i < 64; i++) {
        const stored = await js.publish("filler.x", chunk).then(() => true, () => false);
        if (!stored) break;
      }
      const res = await running.track();
      expect(res.status).toBe(503);
      expect(res.json).toMatchObject({ code: "storage_full" });
    });
  }, 60_000);

  it("tail on a NATS no ingest has used says so (regression: a stack trace), and ends with exit 1 when NATS is gone for good (regression: it looked like a clean end)", async () => {
    const storeDir = tempDir("nats");
    const server = await LocalNatsServer.start({ storeDir });
    const early = run("tail", "--nats", server.url);
    expect(early.status).toBe(1);
    expect(early.stderr).toBe(`trackhook: TRACKHOOK_EVENTS is not on NATS at ${server.url}: no ingest has run against it yet (start \`trackhook ingest\` or \`dev\` first), or --nats names another server\n`);
    const nc = await connect({ servers: server.url });
    await ensureStream(await jetstreamManager(nc), eventsStreamConfig({ maxAgeMs: 3_600_000, maxBytes: 1024 ** 2, duplicateWindowMs: 60_000, replicas: 1 }));
    await nc.close();
    const tail = spawnCli("tail", "--nats", server.url);
    try {
      await tail.waitFor(/tailing all sources/, 15_000);
      await server.kill("SIGKILL");
      // The admin client gives up after nats.js's default reconnects (10, 2 s apart).
      await tail.waitFor(/trackhook: stopped: the connection to NATS at nats:\/\/127\.0\.0\.1:\d+ was lost/, 45_000);
      expect(await tail.exited).toBe(1);
    } finally {
      tail.child.kill("SIGKILL");
      await server.stop();
    }
  }, 60_000);
});

describe("trackhook on a NATS it cannot use (found by a CLI review: a nats.js stack trace, exit 1)", () => {
  async function natsServer(args: string[]): Promise<{ url: string; stop: () => void }> {
    const port = await freePort();
    const child = spawn(findNatsServer(), ["-a", "127.0.0.1", "-p", String(port), ...args], { stdio: "ignore" });
    const url = `nats://127.0.0.1:${port}`;
    for (const deadline = Date.now() + 10_000; ; await new Promise((r) => setTimeout(r, 50))) {
      const nc = await connect({ servers: url, user: "viewer", pass: "pw", reconnect: false }).catch(() => undefined);
      if (nc) {
        await nc.close();
        break;
      }
      if (Date.now() > deadline) throw new Error(`nats-server on ${url} did not start`);
    }
    return { url, stop: () => void child.kill() };
  }

  it("without JetStream: one line saying how to enable it, exit 2", async () => {
    const server = await natsServer(["--user", "viewer", "--pass", "pw"]);
    try {
      for (const command of [["attempts", "--destination", "default/hook"], ["tail"], ["status"]]) {
        const res = spawnSync(process.execPath, [CLI, ...command, "--nats", server.url], { cwd: root, encoding: "utf8", timeout: 20_000, env: { ...process.env, TRACKHOOK_NATS_USER: "viewer", TRACKHOOK_NATS_PASSWORD: "pw" } });
        expect(res.stderr).toBe("trackhook: JetStream does not answer on this NATS: it is not enabled (run nats-server with -js, or a jetstream {} block in its config; with accounts, the account needs JetStream too), or the server is still starting\n");
        expect(res.status).toBe(2);
      }
    } finally {
      server.stop();
    }
  });

  it("delete-user on a NATS no ingest has used: says so before giving out a request id, and sends nothing (it said JetStream was not enabled)", async () => {
    const dir = tempDir("noevents");
    const config = join(dir, "config.yaml");
    writeFileSync(config, `${readFileSync(join(root, "examples", "dev.yaml"), "utf8")}---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: hook }
spec: { sources: [website], urls: ["https://hooks.example.com/in"] }
`);
    const server = await natsServer(["-js", "-sd", join(dir, "store"), "--user", "viewer", "--pass", "pw"]);
    try {
      const res = spawnSync(process.execPath, [CLI, "delete-user", "--config", config, "--source", "default/website", "--user-id", "u-1", "--nats", server.url], { cwd: root, encoding: "utf8", timeout: 20_000, env: { ...process.env, TRACKHOOK_NATS_USER: "viewer", TRACKHOOK_NATS_PASSWORD: "pw" } });
      expect(res.stderr).toBe(`trackhook: TRACKHOOK_EVENTS is not on NATS at ${server.url}: no ingest has run against it yet (start \`trackhook ingest\` or \`dev\` first), or --nats names another server; nothing sent\n`);
      expect(res.stdout).toBe("");
      expect(res.status).toBe(1);
    } finally {
      server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a service waiting for JetStream says that it may not be enabled", async () => {
    const server = await natsServer([]);
    const ingest = spawnCli("ingest", "--config", join(root, "examples"), "--nats", server.url, "--port", String(await freePort()));
    try {
      await ingest.waitFor(/JetStream does not answer \(a server just restarted is still starting it; one run without -js, or a jetstream \{\} block, never will\); trying again/, 15_000);
    } finally {
      ingest.child.kill("SIGKILL");
      server.stop();
    }
  });

  it("with a NATS user that may not use JetStream: one line naming what was refused, exit 2", async () => {
    const dir = tempDir("perm");
    const conf = join(dir, "nats.conf");
    writeFileSync(conf, `jetstream { store_dir: "${join(dir, "store")}" }\nauthorization { users = [ { user: viewer, password: pw, permissions: { publish: { allow: ["_INBOX.>"] }, subscribe: { allow: ["_INBOX.>"] } } } ] }\n`);
    const server = await natsServer(["-c", conf]);
    try {
      const res = spawnSync(process.execPath, [CLI, "dead-letters", "--destination", "default/hook", "--nats", server.url], { cwd: root, encoding: "utf8", timeout: 20_000, env: { ...process.env, TRACKHOOK_NATS_USER: "viewer", TRACKHOOK_NATS_PASSWORD: "pw" } });
      expect(res.stderr).toBe(`trackhook: the NATS user may not do this: Permissions Violation for Publish to "$JS.API.INFO" (docs/nats-permissions.conf has the permissions of each component, of the installation's admin user and of a team's)\n`);
      expect(res.status).toBe(2);
    } finally {
      server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("trackhook dev's activity lines", () => {
  /** Starts dev on a config of its own; resolves with its ingest URL once the banner is out. */
  const startDev = async (config: string, ...flags: string[]) => {
    const dataDir = tempDir("dev");
    const child = spawn(process.execPath, [CLI, "dev", "--config", config, "--port", "0", "--data-dir", dataDir, "--log-level", "warn", ...flags], { cwd: root });
    const output = { stderr: "" };
    child.stderr.on("data", (c: Buffer) => (output.stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    await expect.poll(() => output.stderr, { timeout: 20_000 }).toContain("trackhook tail");
    const url = /ingest\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(output.stderr)![1]!;
    return {
      url, output, stop: async () => {
        child.kill("SIGTERM");
        const code = await exited;
        rmSync(dataDir, { recursive: true, force: true });
        return code;
      },
    };
  };

  it("say what became of each message: stored, delivered, failed, dead-lettered, not accepted, refused", async () => {
    const receiver = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        if (req.url === "/wait") res.writeHead(429, { "retry-after": "30" }).end();
        else res.writeHead(req.url === "/gone" ? 404 : req.url === "/busy" || req.url === "/pair-b" ? 503 : 200).end("ok");
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    const port = (receiver.address() as AddressInfo).port;
    const dir = tempDir("activity");
    writeFileSync(join(dir, "config.yaml"), `${readFileSync(join(root, "examples", "dev.yaml"), "utf8")}
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: hook }
spec: { sources: [website], urls: ["http://127.0.0.1:${port}/hook"] }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: gone }
spec: { sources: [website], urls: ["http://127.0.0.1:${port}/gone"] }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: busy }
spec: { sources: [website], urls: ["http://127.0.0.1:${port}/busy"] }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: pair }
spec: { sources: [website], urls: ["http://127.0.0.1:${port}/pair-a", "http://127.0.0.1:${port}/pair-b"] }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: waits }
spec: { sources: [website], urls: ["http://127.0.0.1:${port}/wait"] }
`);
    const dev = await startDev(dir);
    try {
      const auth = { headers: { authorization: basic("dev-write-key") } };
      expect((await post(`${dev.url}/v1/track`, { userId: "u1", event: "Signed Up", messageId: "act-1" }, auth)).status).toBe(200);
      expect((await post(`${dev.url}/v1/track`, { event: "Anonymous", messageId: "act-2" }, auth)).status).toBe(200);
      expect((await post(`${dev.url}/v1/identify`, { userId: "u1" }, { headers: { authorization: basic("not-a-key") } })).status).toBe(401);
      // Ids come from whoever holds a write key: none can forge a line or color the terminal.
      expect((await post(`${dev.url}/v1/track`, { userId: "u2\n12:00:00  delivered  forged\u001b[31m", event: "Sneaky", messageId: "act-3" }, auth)).status).toBe(200);
      const line = (pattern: RegExp) => expect.poll(() => dev.output.stderr, { timeout: 15_000 }).toMatch(pattern);
      await line(/^\d\d:\d\d:\d\d {2}stored +default\/website {2}track "Signed Up" userId u1 {2}\[act-1\]$/m);
      await line(/^\d\d:\d\d:\d\d {2}delivered +default\/hook {2}200 in \d+ ms from http:\/\/127\.0\.0\.1:\d+\/hook {2}\[act-1\]$/m);
      await line(/^\d\d:\d\d:\d\d {2}failed +default\/gone {2}404 in \d+ ms from http:\/\/127\.0\.0\.1:\d+\/gone {2}\[act-1, not retried\]$/m);
      // A retryable failure promises no retry: the last one before a dead letter is retryable too (found by a review).
      await line(/^\d\d:\d\d:\d\d {2}failed +default\/busy {2}503 in \d+ ms from http:\/\/127\.0\.0\.1:\d+\/busy {2}\[act-1, retryable\]$/m);
      await line(/^\d\d:\d\d:\d\d {2}dead-lettered default\/gone {2}permanent_failure, last answer 404 {2}\[act-1\] {2}\(trackhook replay --destination default\/gone\)$/m);
      await line(/^\d\d:\d\d:\d\d {2}not accepted +default\/website {2}no_user_anon_id: neither userId nor anonymousId is set {2}\[act-2\]$/m);
      await line(/^\d\d:\d\d:\d\d {2}refused 401 +\/v1\/identify {2}invalid_write_key: Unknown or disabled write key$/m);
      await line(/^\d\d:\d\d:\d\d {2}stored +default\/website {2}track "Sneaky" userId u2\\u000a12:00:00 {2}delivered {2}forged\\u001b\[31m {2}\[act-3\]$/m);
      // Attempts are stored a delivery turn's at a time, several records to a message (here both
      // URLs of one round): each is a line (found by a review: only single-record messages made one).
      // The other URL's failure is not retried once one URL delivered the message.
      await line(/^\d\d:\d\d:\d\d {2}delivered +default\/pair {2}200 in \d+ ms from http:\/\/127\.0\.0\.1:\d+\/pair-a {2}\[act-1\]$/m);
      await line(/^\d\d:\d\d:\d\d {2}failed +default\/pair {2}503 in \d+ ms from http:\/\/127\.0\.0\.1:\d+\/pair-b {2}\[act-1, delivered by another URL\]$/m);
      await line(/^\d\d:\d\d:\d\d {2}paused +default\/waits {2}http:\/\/127\.0\.0\.1:\d+\/wait: it asked to wait \(Retry-After\): nothing is sent to it for 30s$/m);
      expect(dev.output.stderr).not.toContain("\u001b");
      expect(dev.output.stderr).not.toMatch(/^12:00:00/m);
    } finally {
      expect(await dev.stop()).toBe(0);
      receiver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("say when a URL that does not answer is paused, and when it answers again", async () => {
    // A port nothing listens on, for now.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));
    const dir = tempDir("pause");
    writeFileSync(join(dir, "config.yaml"), `${readFileSync(join(root, "examples", "dev.yaml"), "utf8")}
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: down }
spec: { sources: [website], urls: ["http://127.0.0.1:${port}/hook"] }
`);
    const dev = await startDev(dir);
    const receiver = createServer((req, res) => req.resume().on("end", () => res.writeHead(200).end()));
    try {
      const auth = { headers: { authorization: basic("dev-write-key") } };
      // Five attempts without an answer open the URL's breaker.
      for (let i = 1; i <= 5; i++) expect((await post(`${dev.url}/v1/track`, { userId: "u1", event: "Down", messageId: `down-${i}` }, auth)).status).toBe(200);
      const line = (pattern: RegExp) => expect.poll(() => dev.output.stderr, { timeout: 30_000, interval: 200 }).toMatch(pattern);
      await line(new RegExp(`^\\d\\d:\\d\\d:\\d\\d {2}paused +default/down {2}http://127\\.0\\.0\\.1:${port}/hook: no answer \\(connection_refused\\): nothing is sent to it for 5s, then one message tries it$`, "m"));
      await new Promise<void>((resolve) => receiver.listen(port, "127.0.0.1", resolve));
      await line(new RegExp(`^\\d\\d:\\d\\d:\\d\\d {2}resumed +default/down {2}http://127\\.0\\.0\\.1:${port}/hook: answers again; messages are sent to it again$`, "m"));
    } finally {
      expect(await dev.stop()).toBe(0);
      receiver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("say what each edit of the config changed, or why it was refused", async () => {
    const dir = tempDir("reload");
    const file = join(dir, "config.yaml");
    const example = readFileSync(join(root, "examples", "dev.yaml"), "utf8");
    const hook = (url: string) => `\n---\napiVersion: trackhook.io/v1alpha1\nkind: WebhookDestination\nmetadata: { name: orders }\nspec: { sources: [website], urls: ["${url}"] }\n`;
    writeFileSync(file, example);
    const dev = await startDev(file);
    try {
      const line = (pattern: RegExp) => expect.poll(() => dev.output.stderr, { timeout: 15_000 }).toMatch(pattern);
      const name = file.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
      writeFileSync(file, example + hook("http://127.0.0.1:9/a"));
      await line(new RegExp(`^\\d\\d:\\d\\d:\\d\\d {2}config +${name} {2}reloaded: webhook default/orders added$`, "m"));
      writeFileSync(file, example.replace("writeKey: dev-write-key", "writeKey: rotated-key") + hook("http://127.0.0.1:9/b"));
      await line(new RegExp(`config +${name} {2}reloaded: source default/website changed \\(write key\\); webhook default/orders changed \\(urls\\)$`, "m"));
      writeFileSync(file, example.replace("kind: Source", "kind: Sourc"));
      await line(new RegExp(`config refused +${name} {2}the previous config stays: .*document 2 \\(Sourc website\\): kind must be one of Source, WebhookDestination, DeletionRequest, Secret$`, "m"));
      writeFileSync(file, example.replace("writeKey: dev-write-key", "writeKey: rotated-key") + hook("http://127.0.0.1:9/b"));
      await line(new RegExp(`config +${name} {2}valid again: nothing a source or webhook does changed$`, "m"));
      writeFileSync(file, example);
      await line(new RegExp(`config +${name} {2}reloaded: source default/website changed \\(write key\\); webhook default/orders removed: nothing more is sent to it; what it has not been sent is kept a minute, in case it comes back$`, "m"));
      // The secret's value is never on the line.
      expect(dev.output.stderr).not.toContain("rotated-key");
    } finally {
      expect(await dev.stop()).toBe(0);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("--quiet prints none", async () => {
    const dev = await startDev("examples/", "--quiet");
    try {
      expect((await post(`${dev.url}/v1/track`, { event: "Anonymous" }, { headers: { authorization: basic("dev-write-key") } })).status).toBe(200);
      expect((await post(`${dev.url}/v1/track`, { userId: "u1", event: "Quiet" }, { headers: { authorization: basic("dev-write-key") } })).status).toBe(200);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(dev.output.stderr).not.toMatch(/^\d\d:\d\d:\d\d {2}/m);
      expect(dev.output.stderr).not.toContain("What happens shows below");
    } finally {
      expect(await dev.stop()).toBe(0);
    }
  });
});
