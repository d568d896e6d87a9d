// Runs a nats-server child process with JetStream and its own store directory: used by
// `trackhook dev` when no --nats is given, and by the test harness.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";


export class NatsServerNotFoundError extends Error {
  readonly code = "TRACKHOOK_NATS_SERVER_NOT_FOUND";
  constructor() {
    const checkout = existsSync(join(findPackageRoot(), "scripts", "tools.sh"));
    super(
      `nats-server was not found ${checkout ? "in .tools/bin or " : ""}on PATH. Get one (2.10 or newer): ` +
        (checkout ? "`npm run tools` builds the pinned version into .tools/bin (needs Go); " : "") +
        "`brew install nats-server`; `go install github.com/nats-io/nats-server/v2@latest`; or a release binary from " +
        "https://github.com/nats-io/nats-server/releases. Or pass --nats <url> to use a running server " +
        "(`docker run -p 4222:4222 nats -js` starts one).",
    );
  }
}

/** The pinned binary from `npm run tools`, else the first nats-server on PATH. */
export function findNatsServer(): string {
  const candidates = [
    join(findPackageRoot(), ".tools", "bin", "nats-server"),
    ...(process.env.PATH ?? "").split(delimiter).filter(Boolean).map((dir) => join(dir, "nats-server")),
  ];
  const found = candidates.find((path) => existsSync(path));
  if (!found) throw new NatsServerNotFoundError();
  return found;
}

function findPackageRoot(): string {
  // Works from sources (dataplane/nats) and from the build (dist/dataplane/nats).
  let dir = fileURLToPath(new URL(".", import.meta.url));
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "schema"))) return dir;
    dir = join(dir, "..");
  }
  return process.cwd();
}

export interface LocalNatsServerOptions {
  storeDir: string;
  /** 0 picks a free port; the same port is reused by restart(). */
  port?: number;
  binary?: string;
  /** Lines of server output, for debugging. */
  onOutput?: (line: string) => void;
  /** More nats-server flags (tests: --user/--pass, --auth). */
  args?: string[];
}

export class LocalNatsServer {
  readonly storeDir: string;
  readonly binary: string;
  port: number;
  #child: ChildProcess | undefined;
  #onOutput: ((line: string) => void) | undefined;
  readonly #args: string[];

  private constructor(options: LocalNatsServerOptions) {
    this.#args = options.args ?? [];
    this.storeDir = options.storeDir;
    this.port = options.port ?? 0;
    this.binary = options.binary ?? findNatsServer();
    this.#onOutput = options.onOutput;
  }

  static async start(options: LocalNatsServerOptions): Promise<LocalNatsServer> {
    const server = new LocalNatsServer(options);
    await server.#spawn();
    return server;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  async #spawn(): Promise<void> {
    const args = ["-a", "127.0.0.1", "-p", this.port === 0 ? "-1" : String(this.port), "-js", "-sd", this.storeDir, "--http_port", "0", ...this.#args];
    // Its own process group: a terminal's Ctrl-C reaches only trackhook, which then stops the
    // server after draining, instead of the server dying under in-flight publishes.
    const child = spawn(this.binary, args, { stdio: ["ignore", "ignore", "pipe"], detached: true });
    this.#child = child;
    // ...and it must not outlive us, however we exit.
    const killOnExit = () => child.kill("SIGKILL");
    process.once("exit", killOnExit);
    child.once("exit", () => process.off("exit", killOnExit));
    await new Promise<void>((resolve, reject) => {
      let buffered = "";
      const onData = (chunk: Buffer) => {
        buffered += chunk.toString();
        let newline: number;
        while ((newline = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, newline);
          buffered = buffered.slice(newline + 1);
          this.#onOutput?.(line);
          const listening = /Listening for client connections on [^\s]+:(\d+)/.exec(line);
          if (listening) this.port = Number(listening[1]);
          if (line.includes("Server is ready")) resolve();
        }
      };
      child.stderr!.on("data", onData);
      child.once("error", reject);
      child.once("exit", (code, signal) => reject(new Error(`nats-server exited before it was ready (code ${code}, signal ${signal})`)));
    });
  }

  /** Sends a signal (SIGKILL for fault tests) and waits for the process to be gone. */
  async kill(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill(signal);
    await exited;
  }

  /** Starts the server again on the same port with the same store. */
  async restart(): Promise<void> {
    await this.kill();
    await this.#spawn();
  }

  async stop(): Promise<void> {
    await this.kill("SIGTERM");
  }
}
