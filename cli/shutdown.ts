// Graceful shutdown on SIGTERM, SIGINT and SIGHUP (a closed terminal): run the steps once; a second
// signal exits at once.
import { constants } from "node:os";
import type { Logger } from "../dataplane/logging.ts";

export function onShutdown(log: Logger, stop: () => Promise<void>): void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, "second signal: exiting now");
      // As a shell reports a process the signal ended: 130 for Ctrl-C, 143 for SIGTERM.
      process.exit(128 + (constants.signals[signal] ?? 0));
    }
    stopping = true;
    // A webhook request may take its destination's whole timeout (up to a minute): say how to skip it.
    log.info({ signal }, "shutting down: finishing in-flight work (a second Ctrl-C or signal exits at once)");
    stop().then(
      () => {
        log.info("stopped");
        process.exit(0);
      },
      (err: unknown) => {
        log.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", handler);
  process.on("SIGINT", handler);
  // Without a handler, Node dies at once on SIGHUP: `dev`'s nats-server was left running.
  process.on("SIGHUP", handler);
}
