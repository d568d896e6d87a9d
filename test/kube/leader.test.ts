// Two operator processes at once: only the Lease holder reconciles; when it dies, the other
// takes over within the lease duration and carries on.
import { describe, expect, it } from "vitest";
import { ConfigWriter, ensureConfigBucket, sha256Hex, sourceKey } from "../../dataplane/config/mod.ts";
import { ensureDestinationConsumer } from "../../dataplane/delivery/mod.ts";
import { EVENTS_STREAM, consumerName } from "../../dataplane/nats/mod.ts";
import { secretYaml, sourceYaml, yamlDocuments } from "../harness/documents.ts";
import { spawnOperator, useOperatorEnv, type OperatorProcess } from "../harness/operator.ts";

const env = useOperatorEnv("lead");

const source = (name: string) => yamlDocuments(secretYaml(`${name}-key`, { writeKey: `key-${name}` }), sourceYaml(name, { name: `${name}-key` }));

const reconciles = async (p: OperatorProcess) => (await p.metric('trackhook_operator_reconcile_total{kind="Source",result="success"}')) ?? 0;

describe("leader election", () => {
  it("lets only the leader reconcile, and fails over when it dies", async () => {
    const a = await spawnOperator(env, { leaseDuration: "5s" });
    const leaderA = await env.waitFor("a leader", async () => ((await a.metric("trackhook_operator_leader")) === 1 ? true : undefined));
    expect(leaderA).toBe(true);
    const b = await spawnOperator(env, { leaseDuration: "5s" });
    try {
      await env.apply(source("one"));
      await env.waitReady("Source", "one");
      expect(await b.metric("trackhook_operator_leader")).toBe(0);
      // The status write lands before the reconcile (and its Event) ends and is counted.
      await env.waitFor("a's reconcile counted", async () => (await reconciles(a)) > 0);
      expect(await reconciles(b)).toBe(0);
      const lease = JSON.parse(await env.cluster.kubectlOk(["get", "lease", "trackhook-operator", "-n", env.namespace, "-o", "json"])) as { spec: { holderIdentity: string; leaseTransitions: number } };
      expect(b.output()).toContain("waiting to become the leader");
      // A standby is healthy and ready (it can take over); both serve their probes.
      for (const p of [a, b]) {
        for (const path of ["/healthz", "/readyz"]) expect((await fetch(p.metricsUrl.replace("/metrics", path))).status).toBe(200);
      }
      expect(b.output()).not.toContain("became the leader");

      const killedAt = Date.now();
      await a.kill();
      await env.waitFor("b to lead", async () => ((await b.metric("trackhook_operator_leader")) === 1 ? true : undefined), 15_000);
      const takeover = Date.now() - killedAt;
      expect(takeover).toBeLessThan(10_000);
      await env.apply(source("two"));
      await env.waitReady("Source", "two");
      await env.waitFor("b's reconcile counted", async () => (await reconciles(b)) > 0);
      const after = JSON.parse(await env.cluster.kubectlOk(["get", "lease", "trackhook-operator", "-n", env.namespace, "-o", "json"])) as { spec: { holderIdentity: string; leaseTransitions: number } };
      expect(after.spec.holderIdentity).not.toBe(lease.spec.holderIdentity);
      expect(after.spec.leaseTransitions).toBe(lease.spec.leaseTransitions + 1);
    } finally {
      await a.stop();
      await b.stop();
    }
  }, 60_000);

  it("hands the lease over at once on a clean shutdown (SIGTERM)", async () => {
    const a = await spawnOperator(env, { leaseDuration: "15s" });
    await env.waitFor("a to lead", async () => ((await a.metric("trackhook_operator_leader")) === 1 ? true : undefined));
    const b = await spawnOperator(env, { leaseDuration: "15s" });
    try {
      const stoppedAt = Date.now();
      await a.stop();
      await env.waitFor("b to lead", async () => ((await b.metric("trackhook_operator_leader")) === 1 ? true : undefined), 15_000);
      // Far sooner than the 15 s a dead leader's lease would block it.
      expect(Date.now() - stoppedAt).toBeLessThan(8_000);
    } finally {
      await b.stop();
    }
  }, 60_000);

  it("on start, removes config entries and consumers whose resources are gone (in its namespace only)", async () => {
    const writer = new ConfigWriter(await ensureConfigBucket(env.nats.nc));
    const ghost = { namespace: env.namespace, name: "ghost", enabled: true, writeKeySha256: sha256Hex("ghost-key") };
    await writer.put(sourceKey(env.namespace, "ghost"), ghost);
    await writer.put(sourceKey("someone-else", "keep"), { ...ghost, namespace: "someone-else", name: "keep" });
    await ensureDestinationConsumer(env.nats.jsm, {
      namespace: env.namespace, name: "ghost-hook", enabled: true, sources: ["ghost"], urls: ["https://example.com/"], headers: [],
      timeoutMs: 5000, retryWindowMs: 60_000, maxInFlight: 10, standardWebhooks: false,
    });
    const operator = await spawnOperator(env);
    try {
      await env.waitFor("the ghost entry removed", async () => (await writer.get(sourceKey(env.namespace, "ghost"))) === undefined);
      await env.waitFor("the ghost consumer removed", async () =>
        (await env.nats.jsm.consumers.info(EVENTS_STREAM, consumerName(env.namespace, "ghost-hook")).then(() => false, () => true)));
      expect(await writer.get(sourceKey("someone-else", "keep"))).toBeDefined();
    } finally {
      await operator.stop();
    }
  }, 60_000);
});
