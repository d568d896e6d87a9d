// `trackhook dev`: everything in one process for a laptop, from the same YAML as a cluster.
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, realpathSync, unlinkSync, writeFileSync } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { FileConfigProvider, matchesNoSource } from "../../dataplane/config/mod.ts";
import { createLogger, type Logger } from "../../dataplane/logging.ts";
import { LocalNatsServer, connectNats } from "../../dataplane/nats/mod.ts";
import { UsageError, integerFlag, natsUrl as natsUrlFlag } from "../args.ts";
import { devLockPath, formatDevLock, isRunning as isAlive, readDevLock } from "../dev-lock.ts";
import { onShutdown } from "../shutdown.ts";
import { DeliveryMetrics, type DeliveryActivity } from "../../dataplane/delivery/mod.ts";
import { IngestMetrics, type IngestActivity } from "../../dataplane/ingest/mod.ts";
import { startActivityFeed, type ActivityFeed } from "../dev-activity.ts";
import { EGRESS_PROXY_HELP, egressProxyFlags, egressProxyOf, startDelivery, type RunningDelivery } from "./deliver.ts";
import { startIngest } from "./ingest.ts";
import { ingestFlags, ingestFlagsHelp, ingestOptions, streamSettings } from "./shared-flags.ts";
import type { Command } from "./types.ts";

export const devCommand: Command = {
  name: "dev",
  summary: "Run trackhook on a laptop: ingest, delivery (and a nats-server unless --nats is given) in one process",
  usage: `trackhook dev --config <file|dir> [--port <n>] [--nats <url>] [options]

  --nats <url>               use this NATS server instead of starting one
  --config <file|dir>        Source, WebhookDestination and Secret YAML documents (reloaded on change)
  --data-dir <dir>           where the started nats-server keeps its store (default .trackhook/)
  --quiet                    no activity lines on stderr (one per message stored, delivery attempt,
                             dead letter, message not accepted, request refused, webhook URL paused
                             or answering again, config reload); the JSON log stays${ingestFlagsHelp}${EGRESS_PROXY_HELP}`,
  flags: { ...ingestFlags, ...egressProxyFlags, config: { type: "string" }, nats: { type: "string" }, "data-dir": { type: "string" }, quiet: { type: "boolean" } },
  async run(values) {
    if (!values.config) throw new UsageError("--config <file|dir> is required");
    const log = createLogger({ level: values["log-level"], name: "dev" });
    const stream = streamSettings(values);
    const options = ingestOptions(values);
    const port = integerFlag("port", values.port ?? "8080", 0, 65535); // before nats-server starts
    const proxy = egressProxyOf(values);
    const config = new FileConfigProvider(values.config, log); // invalid config fails here, before anything starts

    let natsServer: LocalNatsServer | undefined;
    let natsUrl = values.nats !== undefined ? natsUrlFlag(values) : undefined; // checked before anything starts
    if (!natsUrl) {
      const dataDir = resolve(values["data-dir"] ?? ".trackhook");
      const storeDir = dirname(devLockPath(dataDir));
      try {
        mkdirSync(storeDir, { recursive: true });
      } catch (err) {
        // A directory it may not write (a read-only checkout, another user's): said, not a stack (found by a review).
        throw new UsageError(`cannot make ${storeDir} for nats-server's store (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): run from a directory you can write, or pass --data-dir <dir> (or --nats <url>)`);
      }
      const lock = lockStoreDir(dataDir, log);
      natsServer = await LocalNatsServer.start({ storeDir });
      lock.natsServerStarted(natsServer.pid, natsServer.url);
      natsUrl = natsServer.url;
      log.info({ nats: natsUrl, storeDir, binary: natsServer.binary }, "started nats-server");
    }
    const nc = await connectNats({ servers: natsUrl, name: "trackhook-dev", log });
    let ingest;
    let delivery: RunningDelivery | undefined;
    let feed: ActivityFeed | undefined;
    // The feed watches streams that ingest and delivery create, so it starts after them.
    const activity: IngestActivity = { notAccepted: (e) => feed?.ingest.notAccepted(e), refused: (e) => feed?.ingest.refused(e) };
    const deliveryActivity: DeliveryActivity = { urlPaused: (e) => feed?.delivery.urlPaused(e), urlResumed: (e) => feed?.delivery.urlResumed(e) };
    // One /metrics for both: process metrics come from the ingest's registry only, and so does
    // the count of streams made again (a name may be registered once).
    const ingestMetrics = new IngestMetrics();
    const deliveryMetrics = new DeliveryMetrics({ defaultMetrics: false, streamsRecreated: ingestMetrics.streamsRecreated });
    try {
      ingest = await startIngest({
        nc, config, log, stream, options, metrics: ingestMetrics, extraRegistries: [deliveryMetrics.registry], activity,
        host: values.host ?? "127.0.0.1",
        port,
      });
      // On a laptop the webhook receivers are usually local too.
      delivery = await startDelivery({ nc, config, log, allowPrivateNetworks: true, metrics: deliveryMetrics, configFromFiles: true, activity: deliveryActivity, ...(proxy ? { proxy } : {}) });
      if (!values.quiet) {
        feed = await startActivityFeed(nc, (line) => process.stderr.write(line));
        config.onReload((reload) => feed?.configReloaded(values.config!, reload));
      }
    } catch (err) {
      await ingest?.close();
      await delivery?.close();
      // Leave nothing running behind a failed start (a port in use, say).
      config.close();
      await nc.close();
      await natsServer?.stop();
      throw err;
    }

    const sources = config.current().sources.map((s) => `${s.namespace}/${s.name}`);
    const notes = new Map(config.current().destinations.map((d) => [`${d.namespace}/${d.name}`, matchesNoSource(d)]));
    const destinations = delivery.service.destinations.map((d) => (notes.get(d) ? `${d} (${notes.get(d)})` : d));
    process.stderr.write(
      `\ntrackhook dev is running\n` +
        `  ingest   ${ingest.url}  (health /healthz, metrics /metrics)\n` +
        `  nats     ${natsUrl}\n` +
        (natsServer ? `  store    ${dirname(natsServer.storeDir)}  (kept across restarts; stop dev and delete it to start over)\n` : "") +
        `  sources  ${sources.join(", ") || "(none: add a Source to " + values.config + ")"}\n` +
        `  webhooks ${destinations.join(", ") || "(none: add a WebhookDestination to " + values.config + ")"}\n\n` +
        `Send a first event, with WRITE_KEY set to a Source's write key (its Secret's value; examples/dev.yaml has dev-write-key):\n` +
        `  curl -u "$WRITE_KEY:" ${ingest.url}/v1/track -H 'content-type: application/json' \\\n` +
        `    -d '{"userId":"user-1","event":"Signed Up","properties":{"plan":"pro"}}'\n` +
        `A message without userId/anonymousId (or a track without event) is answered 200 too, as by Segment,\n` +
        `and not stored: a "not accepted" line below says why.\n` +
        `SDKs take ${ingest.url} as their host (README: "Point your SDKs at trackhook"); a web page can load\n` +
        `analytics.js from ${ingest.url}/analytics.js/v1/$WRITE_KEY/analytics.min.js (with analytics._cdn = "${ingest.url}").\n\n` +
        `The admin commands (status, attempts, dead-letters, replay, tail, delete-user) find this NATS when run from\n` +
        `this directory; from elsewhere (the port changes with every start):\n` +
        `  export TRACKHOOK_NATS_URL=${natsUrl}\n` +
        `  alias trackhook=${shellQuote(`${process.execPath} ${realpathSync(process.argv[1]!)}`)}\n` +
        `  trackhook status    # or: trackhook tail, trackhook dead-letters --destination <name>\n\n` +
        (feed ? `What happens shows below, a line each (--quiet: none); the JSON log is on stdout.\n\n` : ""),
    );

    onShutdown(log, async () => {
      await ingest.close();
      await delivery.close();
      await feed?.close();
      config.close();
      await nc.drain();
      await natsServer?.stop();
    });
  },
};

/** One shell word, single-quoted. */
const shellQuote = (text: string) => `'${text.replaceAll("'", `'\\''`)}'`;

/**
 * One `dev` per data dir: two nats-servers writing one JetStream store would corrupt it. The lock
 * is a file with the holder's pid and its nats-server's, taken over when the holder is gone (a
 * crash, a kill -9). A nats-server the holder left running (it cannot die with a process killed
 * by SIGKILL) is stopped first: a second one on the same store is the corruption the lock exists
 * to prevent (found by a review: each crash left one more running).
 */
function lockStoreDir(dataDir: string, log: Logger): { natsServerStarted(pid: number | undefined, url: string): void } {
  const path = devLockPath(dataDir);
  const storeDir = dirname(path);
  const lock = readDevLock(path);
  if (lock && lock.holder !== process.pid && isAlive(lock.holder)) {
    throw new UsageError(`another trackhook dev (pid ${lock.holder}) uses ${dataDir}; stop it, or give this one another --data-dir`);
  }
  const left = lock?.natsServer;
  if (left !== undefined && isAlive(left) && isNatsServerOn(left, storeDir)) {
    try {
      stopLeftServer(left);
      log.warn({ pid: left, storeDir }, "stopped the nats-server a trackhook dev that did not exit cleanly left running on this store");
    } catch (err) {
      throw new UsageError(`a nats-server (pid ${left}) left by an earlier trackhook dev still uses ${storeDir} and could not be stopped (${(err as Error).message}); stop it, or give this dev another --data-dir`);
    }
  }
  writeFileSync(path, formatDevLock({ holder: process.pid }));
  process.once("exit", () => {
    try {
      if (readDevLock(path)?.holder === process.pid) unlinkSync(path);
    } catch {
      // already gone
    }
  });
  // The admin commands run from the same directory read the URL here (cli/args.ts).
  return { natsServerStarted: (pid, url) => pid !== undefined && writeFileSync(path, formatDevLock({ holder: process.pid, natsServer: pid, natsUrl: url })) };
}

/**
 * Whether a process is a nats-server on this store (the pid in the lock file may be another
 * process's by now): its program is nats-server and its `-sd` is this directory, exactly.
 */
function isNatsServerOn(pid: number, storeDir: string): boolean {
  let argv: string[];
  try {
    argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  } catch {
    // macOS: no /proc. ps prints the command line as one string (-ww: not cut at the terminal's
    // width, which it assumes when writing to a pipe), so a store path with spaces is matched
    // as a substring, not by splitting.
    try {
      const line = execFileSync("ps", ["-ww", "-o", "command=", "-p", String(pid)], { encoding: "utf8" }).trim();
      // The program is what comes before the first flag: its path may hold spaces too.
      const program = line.includes(" -") ? line.slice(0, line.indexOf(" -")) : line;
      return /^nats-server/.test(basename(program)) && ` ${line} `.includes(` -sd ${storeDir} `);
    } catch {
      return false;
    }
  }
  const sd = argv.indexOf("-sd");
  return /^nats-server/.test(basename(argv[0] ?? "")) && sd > 0 && argv[sd + 1] === storeDir;
}

/** SIGTERM, up to 5 s to write its store out, then SIGKILL. */
function stopLeftServer(pid: number): void {
  process.kill(pid, "SIGTERM");
  const until = Date.now() + 5_000;
  while (isAlive(pid) && Date.now() < until) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
  if (isAlive(pid)) process.kill(pid, "SIGKILL");
}

