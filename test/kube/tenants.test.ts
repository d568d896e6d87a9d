// Teams sharing a cluster, each in its own namespace: a write key one namespace uses never
// carries its traffic to another's Source (found by a multi-tenant review), whether one operator
// watches several namespaces or each namespace has its own operator on one NATS.
import { describe, expect, it } from "vitest";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Kvm } from "@nats-io/kv";
import { CONFIG_BUCKET, sourceKey } from "../../dataplane/config/mod.ts";
import { GROUP, VERSION } from "../../schema/mod.ts";
import { secretYaml, sourceYaml } from "../harness/documents.ts";
import { basic, post } from "../harness/ingest.ts";
import { startOperator, useOperatorEnv, type KubeResource } from "../harness/operator.ts";

const env = useOperatorEnv("tenant-a");

/** A second team's namespace on the same API server. */
async function otherNamespace(): Promise<{ namespace: string; apply(yaml: string): Promise<void>; ready(name: string, status: "True" | "False"): Promise<KubeResource> }> {
  const namespace = await env.cluster.randomNamespace("tenant-b");
  const custom = env.cluster.kubeConfig().makeApiClient(CustomObjectsApi);
  return {
    namespace,
    apply: async (yaml) => void (await env.cluster.kubectlOk(["apply", "-n", namespace, "-f", "-"], { input: yaml })),
    ready: (name, status) =>
      env.waitFor(`Source ${namespace}/${name} Ready=${status}`, async () => {
        const source = (await custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: "sources", name })) as KubeResource;
        const ready = source.status?.conditions?.find((c) => c.type === "Ready");
        return ready?.status === status && source.status!.observedGeneration === source.metadata.generation ? source : undefined;
      }),
  };
}

async function configEntry(namespace: string, name: string): Promise<string | undefined> {
  const kv = await new Kvm(env.nats.nc).open(CONFIG_BUCKET);
  return (await kv.get(sourceKey(namespace, name)))?.operation;
}

const track = (key: string) => post(`${env.ingest.url}/v1/track`, { userId: "u-1", event: "Checked Out" }, { headers: { authorization: basic(key) } });

describe("one operator watching two namespaces (--watch-namespace a,b)", () => {
  it("a key freed in one namespace goes to that namespace's Source, never to a copy waiting in another (regression: the copy took the key and its traffic when the holder was renamed in Git)", async () => {
    const b = await otherNamespace();
    const operator = await startOperator(env, { watchNamespaces: [env.namespace, b.namespace] });
    try {
      await env.apply([secretYaml("web-key", { writeKey: "public-snippet-key" }), sourceYaml("web", { name: "web-key" })].join("---\n"));
      await env.waitReady("Source", "web");
      // Team B copies the key from A's public page.
      await b.apply([secretYaml("copied-key", { writeKey: "public-snippet-key" }), sourceYaml("squat", { name: "copied-key" })].join("---\n"));
      const refused = await b.ready("squat", "False");
      expect(refused.status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey", message: expect.stringContaining("a Source in another namespace already uses the same write key") });
      expect(refused.status!.writeKeyHeldElsewhere).toMatchObject({ secretName: "copied-key", secretKey: "writeKey" });

      // Team A renames its Source as docs/gitops.md says: the new one first, then the old one deleted.
      await env.apply(sourceYaml("web-v2", { name: "web-key" }));
      await env.waitReady("Source", "web-v2", "False");
      await env.cluster.kubectlOk(["delete", "source", "web", "-n", env.namespace]);
      await env.waitReady("Source", "web-v2");
      const still = await b.ready("squat", "False");
      expect(still.status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey" });
      expect(await configEntry(b.namespace, "squat")).toBeUndefined();
      expect((await track("public-snippet-key")).status).toBe(200);

      // Nor when team A deletes its Source altogether: that namespace's apps may still send with it.
      await env.cluster.kubectlOk(["delete", "source", "web-v2", "-n", env.namespace]);
      await env.waitFor("A's key refused", async () => (await track("public-snippet-key")).status === 401);
      await env.waitFor("B's copy told why it stays refused", async () => (await b.ready("squat", "False")).status!.conditions![0]!.message.includes("not taken over now that it is free"));
      expect(await configEntry(b.namespace, "squat")).toBeUndefined();

      // Team B claims it on purpose: its Secret changed (here re-labelled, a new resourceVersion).
      await env.cluster.kubectlOk(["label", "secret", "copied-key", "-n", b.namespace, "claimed=yes"]);
      const taken = await b.ready("squat", "True");
      expect(taken.status!.writeKeyHeldElsewhere).toBeUndefined();
      expect(await configEntry(b.namespace, "squat")).toBe("PUT");
      expect((await track("public-snippet-key")).status).toBe(200);
    } finally {
      await operator.stop();
    }
  });
});

describe("an operator per namespace on one NATS (releases scoped to one team each)", () => {
  it("a key another operator's namespace holds is refused, not accepted twice (regression: both Ready, ingest sent the traffic to one of them)", async () => {
    const b = await otherNamespace();
    const operatorA = await startOperator(env, { watchNamespaces: [env.namespace], leaseName: "tenant-a-operator" });
    const operatorB = await startOperator(env, { watchNamespaces: [b.namespace], leaseName: "tenant-b-operator" });
    try {
      await env.apply([secretYaml("shop-key", { writeKey: "shared-by-accident" }), sourceYaml("shop", { name: "shop-key" })].join("---\n"));
      await env.waitReady("Source", "shop");
      await b.apply([secretYaml("shop-key", { writeKey: "shared-by-accident" }), sourceYaml("shop", { name: "shop-key" })].join("---\n"));
      const refused = await b.ready("shop", "False");
      expect(refused.status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey", message: expect.stringContaining("a Source in another namespace") });
      expect(await configEntry(b.namespace, "shop")).toBeUndefined();
      // Operator B leaves A's entry alone: a holder it cannot see is not an orphan.
      expect(await configEntry(env.namespace, "shop")).toBe("PUT");
    } finally {
      await operatorB.stop();
      await operatorA.stop();
    }
  });
});
