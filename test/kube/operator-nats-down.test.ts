// While NATS does not answer, a change the operator cannot apply shows in status (Ready Unknown,
// Retrying, with the error) instead of the last success, and is applied once NATS is back.
import { afterAll, describe, expect, it } from "vitest";
import { createLogger } from "../../dataplane/logging.ts";
import { Operator, kubeClients, operatorOptions } from "../../operator/mod.ts";
import { freeze, thaw } from "../harness/freeze.ts";
import { secretYaml, sourceYaml } from "../harness/documents.ts";
import { useOperator, useOperatorEnv, type KubeResource } from "../harness/operator.ts";

const env = useOperatorEnv("natsdown");
useOperator(env);

const ready = (object: KubeResource | undefined) => object?.status?.conditions?.find((c) => c.type === "Ready");

afterAll(() => {
  thaw(env.nats.server.pid!);
});

describe("NATS unreachable", () => {
  it("a Source change that cannot be written says Retrying, then Reconciled once NATS is back (regression: Ready stayed True)", async () => {
    await env.apply([secretYaml("k", { writeKey: "first-key" }), sourceYaml("web", { name: "k" })].join("---\n"));
    await env.waitReady("Source", "web");

    await freeze(env.nats.server.pid!);
    try {
      await env.apply(secretYaml("k", { writeKey: "rotated-key" })); // the new digest must reach the bucket
      const retrying = await env.waitFor("Ready=Unknown Retrying", async () => {
        const source = await env.get("Source", "web");
        return ready(source)?.reason === "Retrying" ? source : undefined;
      }, 30_000);
      // Saying what failed (found by a review: "retrying: timeout" alone).
      expect(ready(retrying)).toMatchObject({ status: "Unknown", message: expect.stringContaining("retrying: NATS (the config bucket or the events stream): ") });
      expect(JSON.stringify(retrying.status)).not.toContain("rotated-key");
      const events = JSON.parse(await env.cluster.kubectlOk(["get", "events", "-n", env.namespace, "-o", "json"])) as { items: Array<{ type: string; reason: string }> };
      expect(events.items.filter((e) => e.reason === "Retrying").map((e) => e.type)).toContain("Warning");
    } finally {
      thaw(env.nats.server.pid!);
    }
    await env.waitFor("Ready=True again", async () => ready(await env.get("Source", "web"))?.reason === "Reconciled", 30_000);
  });

  it("a leader that cannot reach NATS hands the lease over and stops (found by a review: it held the lease while a standby that reached NATS sat idle)", async () => {
    const leaseName = "nats-loss-lease";
    const operator = new Operator(
      { kube: kubeClients(env.cluster.kubeConfig()), nc: await env.nats.connect(), log: createLogger({ level: "silent" }) },
      operatorOptions({ watchNamespaces: [env.namespace], leaseNamespace: env.namespace, leaseName, leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2000, natsLossMs: 2_000 }),
    );
    let lost!: (reason: string) => void;
    const stopped = new Promise<string>((resolve) => (lost = resolve));
    await operator.run(lost);
    expect(operator.leading).toBe(true);
    await env.nats.server.kill();
    try {
      const reason = await Promise.race([stopped, new Promise<string>((resolve) => setTimeout(() => resolve("still leading"), 15_000))]);
      expect(reason).toMatch(/^NATS unreachable for \d+ s: the lease is handed to a replica that reaches it$/);
      const holder = await env.cluster.kubectlOk(["get", "lease", leaseName, "-n", env.namespace, "-o", "jsonpath={.spec.holderIdentity}"]);
      expect(holder).toBe(""); // released: a standby takes it at once
    } finally {
      await operator.stop();
      await env.nats.server.restart();
    }
  });
});
