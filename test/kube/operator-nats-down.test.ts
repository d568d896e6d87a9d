// While NATS does not answer, a change the operator cannot apply shows in status (Ready Unknown,
// Retrying, with the error) instead of the last success, and is applied once NATS is back.
import { afterAll, describe, expect, it } from "vitest";
import { secretYaml, sourceYaml } from "../harness/documents.ts";
import { useOperator, useOperatorEnv, type KubeResource } from "../harness/operator.ts";

const env = useOperatorEnv("natsdown");
useOperator(env);

const ready = (object: KubeResource | undefined) => object?.status?.conditions?.find((c) => c.type === "Ready");

afterAll(() => {
  process.kill(env.nats.server.pid!, "SIGCONT");
});

describe("NATS unreachable", () => {
  it("a Source change that cannot be written says Retrying, then Reconciled once NATS is back (regression: Ready stayed True)", async () => {
    await env.apply([secretYaml("k", { writeKey: "first-key" }), sourceYaml("web", { name: "k" })].join("---\n"));
    await env.waitReady("Source", "web");

    process.kill(env.nats.server.pid!, "SIGSTOP");
    try {
      await env.apply(secretYaml("k", { writeKey: "rotated-key" })); // the new digest must reach the bucket
      const retrying = await env.waitFor("Ready=Unknown Retrying", async () => {
        const source = await env.get("Source", "web");
        return ready(source)?.reason === "Retrying" ? source : undefined;
      }, 30_000);
      expect(ready(retrying)).toMatchObject({ status: "Unknown", message: expect.stringContaining("retrying") });
      expect(JSON.stringify(retrying.status)).not.toContain("rotated-key");
      const events = JSON.parse(await env.cluster.kubectlOk(["get", "events", "-n", env.namespace, "-o", "json"])) as { items: Array<{ type: string; reason: string }> };
      expect(events.items.filter((e) => e.reason === "Retrying").map((e) => e.type)).toContain("Warning");
    } finally {
      process.kill(env.nats.server.pid!, "SIGCONT");
    }
    await env.waitFor("Ready=True again", async () => ready(await env.get("Source", "web"))?.reason === "Reconciled", 30_000);
  });
});
