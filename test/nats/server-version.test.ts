// The nats-server version check at connect (found by a review: Debian's nats-server 2.9 let
// `dev` start, then refused every destination's consumer, and nothing was ever delivered).
import { describe, expect, it } from "vitest";
import { createLogger } from "../../dataplane/logging.ts";
import { MIN_NATS_SERVER, NatsServerTooOldError, checkServerVersion, compareVersions, connectNats } from "../../dataplane/nats/mod.ts";
import { startNats } from "../harness/nats.ts";

describe("nats-server version", () => {
  it("compares dotted versions numerically, ignoring a pre-release suffix", () => {
    expect(compareVersions("2.9.10", "2.10.0")).toBe(-1);
    expect(compareVersions("2.10.0", "2.10.0")).toBe(0);
    expect(compareVersions("v2.14.9", "2.10.0")).toBe(1);
    expect(compareVersions("2.11.0-beta.1", "2.11.0")).toBe(0);
    expect(compareVersions("3.0", "2.99.99")).toBe(1);
  });

  it("refuses a server older than the minimum, naming both versions and how to upgrade", () => {
    const lines: string[] = [];
    const log = createLogger({ level: "warn", destination: { write: (line) => void lines.push(line) } });
    expect(() => checkServerVersion("2.9.10", "nats://old:4222", log)).toThrow(NatsServerTooOldError);
    expect(() => checkServerVersion("2.9.10", "nats://old:4222", log)).toThrow(new RegExp(`is 2\\.9\\.10; trackhook needs ${MIN_NATS_SERVER.replaceAll(".", "\\.")} or newer.*Upgrade it`));
    checkServerVersion("2.12.1", "nats://older:4222", log);
    expect(lines.join("")).toContain("older than the versions trackhook is tested on");
    lines.length = 0;
    checkServerVersion("2.14.9", "nats://current:4222", log);
    expect(lines).toEqual([]);
  });

  it("connects to the pinned server without a word about its version", async () => {
    const nats = await startNats();
    const lines: string[] = [];
    const log = createLogger({ level: "warn", destination: { write: (line) => void lines.push(line) } });
    try {
      const nc = await connectNats({ servers: nats.server.url, name: "version-check", log });
      expect(compareVersions(nc.info!.version, MIN_NATS_SERVER)).toBe(1);
      await nc.close();
      expect(lines.filter((l) => l.includes("version"))).toEqual([]);
    } finally {
      await nats.stop();
    }
  });
});
