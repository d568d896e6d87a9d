// The operator's Secret cache asks the API server for metadata only: values are never
// transferred. Checked against the real kube-apiserver, for the list and for the watch.
import { Watch } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { listMetadata, metadataOnly } from "../../operator/kube/metadata.ts";
import { useControlPlane } from "../harness/control-plane.ts";

const cluster = useControlPlane();

describe("metadata-only list and watch", () => {
  it("list Secrets as PartialObjectMetadata, without their values", async () => {
    const ns = await cluster.randomNamespace("meta");
    await cluster.kubectlOk(["create", "secret", "generic", "s1", "-n", ns, "--from-literal=writeKey=never-sent"]);
    const list = await listMetadata(cluster.kubeConfig(), `/api/v1/namespaces/${ns}/secrets`);
    expect(list.items.map((s) => s.metadata.name)).toEqual(["s1"]);
    expect(list.metadata?.resourceVersion).toMatch(/^\d+$/);
    expect(JSON.stringify(list)).not.toContain("never-sent");
    expect(JSON.stringify(list)).not.toContain(Buffer.from("never-sent").toString("base64"));
  });

  it("watch Secrets as PartialObjectMetadata, without their values", async () => {
    const ns = await cluster.randomNamespace("meta-watch");
    const events: Array<{ phase: string; object: unknown }> = [];
    const watch = new Watch(metadataOnly(cluster.kubeConfig()));
    const abort = await watch.watch(`/api/v1/namespaces/${ns}/secrets`, {}, (phase, object) => events.push({ phase, object }), () => {});
    try {
      await cluster.kubectlOk(["create", "secret", "generic", "s2", "-n", ns, "--from-literal=sharedSecret=never-sent"]);
      await expect.poll(() => events.length, { timeout: 10_000 }).toBeGreaterThan(0);
      expect(events[0]).toMatchObject({ phase: "ADDED", object: { kind: "PartialObjectMetadata", metadata: { name: "s2" } } });
      expect(JSON.stringify(events)).not.toContain(Buffer.from("never-sent").toString("base64"));
    } finally {
      abort.abort();
    }
  });

  it("a refused list is an error with the status, not an empty cache", async () => {
    await expect(listMetadata(cluster.kubeConfig(), "/api/v1/namespaces/x/nosuchkind")).rejects.toMatchObject({ code: 404 });
  });
});
