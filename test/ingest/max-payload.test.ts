// A nats-server whose max_payload is under the largest message ingest accepts refuses such
// messages at every try (503 to an SDK that sends the same batch again and again): ingest says so
// at start, as an error naming what to change (found by a review).
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { buildIngestApp } from "../../dataplane/ingest/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { LocalNatsServer } from "../../dataplane/nats/mod.ts";
import { TEST_CONFIG, configFromYaml } from "../harness/ingest.ts";
import { tempDir } from "../harness/temp.ts";

describe("nats-server's max_payload", () => {
  it("under the largest stored message is an error line at start; at its default, none", async () => {
    const dir = tempDir("maxpayload");
    const conf = join(dir, "nats.conf");
    writeFileSync(conf, "max_payload: 4KB\n");
    for (const [args, expected] of [[["-c", conf], true], [[], false]] as const) {
      const server = await LocalNatsServer.start({ storeDir: join(dir, `store-${String(expected)}`), args: [...args] });
      const lines: string[] = [];
      const log = createLogger({ level: "error", destination: { write: (line) => void lines.push(line) } });
      const nc = await connect({ servers: server.url });
      try {
        const app = await buildIngestApp({ nc, config: configFromYaml(TEST_CONFIG), logger: log });
        await app.close();
        const said = lines.map((l) => JSON.parse(l) as { msg: string; maxPayload?: number; needed?: number }).filter((l) => l.msg.includes("max_payload"));
        // 32KB, a batch context of up to 32KB merged in, 1KB of enrichment and 1KB of headers.
        if (expected) expect(said).toEqual([expect.objectContaining({ maxPayload: 4096, needed: 67_584 })]);
        else expect(said).toEqual([]);
      } finally {
        await nc.close();
        await server.stop();
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });
});
