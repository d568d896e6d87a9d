// A headless Chromium (Debian's `chromium`, installed by scripts/tools-browser.sh) driven over the
// Chrome DevTools Protocol through --remote-debugging-pipe: NUL-terminated JSON on fds 3 and 4, so
// no port, no WebSocket and no npm dependency. Each page gets its own browser context (cookies,
// localStorage and the CORS preflight cache start empty) and records what the browser reports.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";

/** The browser binary: $CHROMIUM, else Debian's. */
export const CHROMIUM_PATH = process.env.CHROMIUM ?? "/usr/bin/chromium";

type Json = Record<string, unknown>;
export interface CdpEvent {
  method: string;
  params: Json;
  sessionId?: string;
}

export class Chromium {
  readonly #child: ChildProcess;
  readonly #toBrowser: Writable;
  readonly #profile: string;
  readonly #pending = new Map<number, { resolve: (v: Json) => void; reject: (e: Error) => void; method: string }>();
  readonly #listeners = new Set<(event: CdpEvent) => void>();
  #nextId = 1;
  #stderr = "";
  #exited: Promise<void>;

  private constructor(child: ChildProcess, profile: string) {
    this.#child = child;
    this.#profile = profile;
    this.#toBrowser = child.stdio[3] as Writable;
    const fromBrowser = child.stdio[4] as Readable;
    // A browser that dies breaks its pipes; that is reported by the exit handler below.
    this.#toBrowser.on("error", () => undefined);
    fromBrowser.on("error", () => undefined);
    let buffered = "";
    fromBrowser.setEncoding("utf8").on("data", (chunk: string) => {
      buffered += chunk;
      let end: number;
      while ((end = buffered.indexOf("\0")) !== -1) {
        this.#receive(JSON.parse(buffered.slice(0, end)));
        buffered = buffered.slice(end + 1);
      }
    });
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (this.#stderr = (this.#stderr + chunk).slice(-8192)));
    this.#exited = new Promise((resolve) =>
      child.once("exit", () => {
        for (const { reject, method } of this.#pending.values()) reject(new Error(`chromium exited during ${method}: ${this.#stderr}`));
        this.#pending.clear();
        resolve();
      }),
    );
  }

  /** Starts the browser; fails with what to run when it is not installed. */
  static async launch(): Promise<Chromium> {
    if (!existsSync(CHROMIUM_PATH)) {
      throw new Error(`Chromium is missing (${CHROMIUM_PATH}): run \`npm run tools\` (it runs scripts/tools-browser.sh), or set CHROMIUM`);
    }
    const profile = mkdtempSync(join(tmpdir(), "trackhook-chromium-"));
    const child = spawn(
      CHROMIUM_PATH,
      [
        "--headless",
        "--remote-debugging-pipe",
        `--user-data-dir=${profile}`,
        // Tests run as root in containers, where Chromium's sandbox cannot start.
        "--no-sandbox",
        // A container's /dev/shm is often 64 MB, too small for Chromium's shared memory.
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-default-apps",
        "--disable-sync",
        "--disable-component-update",
        "--disable-background-networking",
        "--disable-domain-reliability",
        "--disable-breakpad",
        "--no-pings",
        "--mute-audio",
        "--password-store=basic",
        "--disable-features=Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions,AutofillServerCommunication",
        // Only loopback is reachable: any other host name fails at once, and no lookup leaves the machine.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "about:blank",
      ],
      // fd 3: commands to the browser; fd 4: its answers and events. Own process group, so that
      // close() can end the renderers with it.
      { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"], detached: true },
    );
    const browser = new Chromium(child, profile);
    try {
      await new Promise<void>((resolve, reject) => {
        child.once("spawn", resolve);
        child.once("error", reject);
      });
      let timer: NodeJS.Timeout | undefined;
      // Its first answer says the browser is ready.
      await Promise.race([
        browser.send("Browser.getVersion"),
        new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`chromium did not answer within 15 s: ${browser.#stderr}`)), 15_000))),
      ]).finally(() => clearTimeout(timer));
    } catch (err) {
      await browser.close();
      throw err;
    }
    return browser;
  }

  send(method: string, params: Json = {}, sessionId?: string): Promise<Json> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      if (this.#child.exitCode !== null || this.#child.signalCode !== null) {
        reject(new Error(`chromium has exited: ${this.#stderr}`));
        return;
      }
      this.#pending.set(id, { resolve, reject, method });
      this.#toBrowser.write(`${JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) })}\0`);
    });
  }

  onEvent(listener: (event: CdpEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #receive(message: { id?: number; result?: Json; error?: { message: string }; method?: string; params?: Json; sessionId?: string }): void {
    if (message.id !== undefined) {
      const pending = this.#pending.get(message.id);
      this.#pending.delete(message.id);
      if (!pending) return;
      if (message.error) pending.reject(new Error(`${pending.method}: ${message.error.message}`));
      else pending.resolve(message.result ?? {});
    } else if (message.method) {
      const event: CdpEvent = { method: message.method, params: message.params ?? {}, ...(message.sessionId ? { sessionId: message.sessionId } : {}) };
      for (const listener of this.#listeners) listener(event);
    }
  }

  /** A new tab in a new browser context, recording its network, console and issues, navigated to `url`. */
  async open(url: string): Promise<Page> {
    const { browserContextId } = await this.send("Target.createBrowserContext", { disposeOnDetach: true });
    const { targetId } = await this.send("Target.createTarget", { url: "about:blank", browserContextId });
    const { sessionId } = await this.send("Target.attachToTarget", { targetId, flatten: true });
    const page = new Page(this, String(sessionId), String(browserContextId));
    await page.start(url);
    return page;
  }

  async close(): Promise<void> {
    // No pid: it never started (and will not report an exit).
    if (this.#child.pid !== undefined && this.#child.exitCode === null && this.#child.signalCode === null) {
      const graceful = this.send("Browser.close").catch(() => undefined);
      const timeout = new Promise((resolve) => setTimeout(resolve, 3_000));
      await Promise.race([Promise.all([graceful, this.#exited]), timeout]);
      // Whatever is left of its process group (renderers, zygote) goes with it.
      try {
        process.kill(-this.#child.pid!, "SIGKILL");
      } catch {
        // already gone
      }
      await this.#exited;
    }
    rmSync(this.#profile, { recursive: true, force: true });
  }
}

export interface BrowserRequest {
  requestId: string;
  url: string;
  method: string;
  /** "Preflight" for a CORS preflight, else Fetch, Script, Document... */
  resourceType: string;
  headers: Record<string, string>;
  postData?: string;
  status?: number;
  responseHeaders?: Record<string, string>;
  failed?: { errorText: string; blockedReason?: string; corsError?: string };
}

interface EventParams {
  requestId: string;
  type?: string;
  request: { url: string; method: string; headers: Record<string, string>; postData?: string };
  response: { status: number; headers: Record<string, string> };
  errorText: string;
  blockedReason?: string;
  corsErrorStatus?: { corsError?: string };
  args: Array<{ value?: unknown; description?: string }>;
  exceptionDetails: { text: string; exception?: { description?: string } };
  entry: { level: string; source: string; text: string; url?: string };
  issue: Json;
}

export class Page {
  /** Every request the page made, in order, with its answer or failure. */
  readonly requests: BrowserRequest[] = [];
  /** console.error/warn calls, uncaught exceptions and browser log entries of level error or warning. */
  readonly problems: string[] = [];
  /** DevTools issues (CorsIssue, MixedContentIssue...), as reported. */
  readonly issues: Json[] = [];
  readonly #browser: Chromium;
  readonly #sessionId: string;
  readonly #browserContextId: string;
  #unsubscribe: () => void = () => undefined;

  constructor(browser: Chromium, sessionId: string, browserContextId: string) {
    this.#browser = browser;
    this.#sessionId = sessionId;
    this.#browserContextId = browserContextId;
  }

  send(method: string, params: Json = {}): Promise<Json> {
    return this.#browser.send(method, params, this.#sessionId);
  }

  async start(url: string): Promise<void> {
    const byId = new Map<string, BrowserRequest>();
    let loaded: () => void = () => undefined;
    const load = new Promise<void>((resolve) => (loaded = resolve));
    this.#unsubscribe = this.#browser.onEvent(({ method, params, sessionId }) => {
      if (sessionId !== this.#sessionId) return;
      // The fields of the events handled below, all in one bag.
      const p = params as unknown as EventParams;
      switch (method) {
        case "Network.requestWillBeSent": {
          const req = p.request;
          const entry: BrowserRequest = { requestId: p.requestId, url: req.url, method: req.method, resourceType: p.type ?? "Other", headers: req.headers };
          if (req.postData !== undefined) entry.postData = req.postData;
          byId.set(p.requestId, entry);
          this.requests.push(entry);
          break;
        }
        case "Network.responseReceived": {
          const entry = byId.get(p.requestId);
          const res = p.response;
          if (entry) Object.assign(entry, { status: res.status, responseHeaders: lowerKeys(res.headers) });
          break;
        }
        case "Network.loadingFailed": {
          const entry = byId.get(p.requestId);
          const cors = p.corsErrorStatus;
          const failed = { errorText: p.errorText, ...(p.blockedReason ? { blockedReason: p.blockedReason } : {}), ...(cors?.corsError ? { corsError: cors.corsError } : {}) };
          if (entry) entry.failed = failed;
          else this.problems.push(`request ${p.requestId} failed: ${JSON.stringify(failed)}`);
          break;
        }
        case "Runtime.consoleAPICalled":
          if (p.type === "error" || p.type === "warning" || p.type === "assert") {
            const args = p.args.map((a) => a.description ?? (typeof a.value === "string" ? a.value : JSON.stringify(a.value)));
            this.problems.push(`console.${p.type}: ${args.join(" ")}`);
          }
          break;
        case "Runtime.exceptionThrown": {
          const details = p.exceptionDetails;
          this.problems.push(`uncaught: ${details.exception?.description ?? details.text}`);
          break;
        }
        case "Log.entryAdded": {
          const entry = p.entry;
          if (entry.level === "error" || entry.level === "warning") this.problems.push(`log (${entry.source}) ${entry.level}: ${entry.text}${entry.url ? ` [${entry.url}]` : ""}`);
          break;
        }
        case "Audits.issueAdded":
          this.issues.push(p.issue);
          break;
        case "Page.loadEventFired":
          loaded();
          break;
      }
    });
    // Post bodies of any size come with requestWillBeSent (the SDK's are small anyway).
    await this.send("Network.enable", { maxPostDataSize: 1024 * 1024 });
    await this.send("Network.setCacheDisabled", { cacheDisabled: true });
    await Promise.all(["Runtime.enable", "Log.enable", "Audits.enable", "Page.enable"].map((m) => this.send(m)));
    const navigation = await this.send("Page.navigate", { url });
    if (navigation.errorText) throw new Error(`navigating to ${url}: ${String(navigation.errorText)}`);
    await load;
  }

  /** Waits (up to 5 s) until `done` holds for what the page has recorded. */
  async waitFor(done: (page: this) => boolean, what: string): Promise<void> {
    const deadline = Date.now() + 5_000;
    while (!done(this)) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; requests: ${this.requests.map((r) => `${r.method} ${r.url} ${r.status ?? "open"}`).join(", ")}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** Waits until every request so far has its answer or has failed. */
  settled(): Promise<void> {
    return this.waitFor((p) => p.requests.every((r) => r.status !== undefined || r.failed), "open requests");
  }

  /** Evaluates an expression in the page, awaiting a promise, and returns its JSON value. */
  async evaluate<T>(expression: string): Promise<T> {
    const { result, exceptionDetails } = (await this.send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true })) as {
      result: { value?: T };
      exceptionDetails?: { text: string; exception?: { description?: string } };
    };
    if (exceptionDetails) throw new Error(`in the page: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`);
    return result.value as T;
  }

  async close(): Promise<void> {
    this.#unsubscribe();
    await this.#browser.send("Target.disposeBrowserContext", { browserContextId: this.#browserContextId }).catch(() => undefined);
  }
}

function lowerKeys(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
}
