// The ValidatingAdmissionPolicy that docs/operations.md ("Several teams on one cluster") gives
// for making every team's Source carry a rateLimit, run as printed on the API server (found by a
// multi-tenant review: the example was never tried). Bound to this test's namespace only, since
// the API server is shared with the other test files.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { repoRoot, useControlPlane } from "../harness/control-plane.ts";
import { secretYaml } from "../harness/documents.ts";

const cluster = useControlPlane();

type Manifest = { kind: string; metadata: { name: string }; spec: Record<string, unknown> };

/** The policy and its binding, from the docs: the YAML block that holds a ValidatingAdmissionPolicy. */
function documentedPolicy(): Manifest[] {
  const docs = readFileSync(join(repoRoot, "docs", "operations.md"), "utf8");
  const block = [...docs.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes("kind: ValidatingAdmissionPolicy\n"));
  if (!block) throw new Error("docs/operations.md has no ValidatingAdmissionPolicy example");
  return parseAllDocuments(block.replace(/^ {2}/gm, "")).map((d) => d.toJS() as Manifest);
}

const sourceWith = (name: string, spec: string) => `apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: ${name} }
spec: { writeKeySecretRef: { name: k, key: writeKey }${spec} }
`;

describe("the documented admission policy for Sources", () => {
  it("refuses a Source without a rateLimit or above 500/s with the documented message, and admits one within it", async () => {
    const namespace = await cluster.randomNamespace("vap");
    const [policy, binding] = documentedPolicy();
    expect([policy!.kind, binding!.kind]).toEqual(["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]);
    const name = `trackhook-source-rate-limit-${namespace}`;
    policy!.metadata.name = name;
    binding!.metadata.name = name;
    binding!.spec.policyName = name;
    binding!.spec.matchResources = { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": namespace } } };
    const apply = (yaml: string) => cluster.kubectl(["apply", "-n", namespace, "-f", "-"], { input: yaml });
    // Made before the policy, without a rateLimit, with the operator's finalizer.
    await cluster.kubectlOk(["apply", "-n", namespace, "-f", "-"], { input: sourceWith("older", "").replace("metadata: { name: older }", "metadata: { name: older, finalizers: [trackhook.io/cleanup] }") });
    try {
      await cluster.kubectlOk(["apply", "-f", "-"], { input: [policy, binding].map((d) => JSON.stringify(d)).join("\n") });
      await cluster.kubectlOk(["apply", "-n", namespace, "-f", "-"], { input: secretYaml("k", { writeKey: "vap-key" }) });
      // The policy takes a moment to be in force after it is made.
      let refused = await apply(sourceWith("none", ""));
      for (const deadline = Date.now() + 15_000; refused.code === 0 && Date.now() < deadline; ) {
        await cluster.kubectlOk(["delete", "source", "none", "-n", namespace, "--wait=false"]);
        await new Promise((r) => setTimeout(r, 250));
        refused = await apply(sourceWith("none", ""));
      }
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toContain("every Source needs spec.rateLimit, at most 500 messages per second");
      const tooFast = await apply(sourceWith("fast", ", rateLimit: { messagesPerSecond: 1000 }"));
      expect(tooFast.code).not.toBe(0);
      expect(tooFast.stderr).toContain("every Source needs spec.rateLimit, at most 500 messages per second");
      const within = await apply(sourceWith("paced", ", rateLimit: { messagesPerSecond: 100, burst: 200 }"));
      expect(within.stderr).toBe("");
      expect(within.code).toBe(0);
      // The older Source: a change to its spec must add a rateLimit, but deleting it, and the
      // finalizer's removal that ends the delete, go through (found by a docs review: it stayed
      // Terminating for good, its finalizer refused).
      const respec = await cluster.kubectl(["patch", "source", "older", "-n", namespace, "--type=merge", "-p", '{"spec":{"enabled":false}}']);
      expect(respec.stderr).toContain("every Source needs spec.rateLimit");
      await cluster.kubectlOk(["delete", "source", "older", "-n", namespace, "--wait=false"]);
      await cluster.kubectlOk(["patch", "source", "older", "-n", namespace, "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]']);
      const gone = await cluster.kubectl(["get", "source", "older", "-n", namespace]);
      expect(gone.stderr).toContain("NotFound");
    } finally {
      await cluster.kubectl(["delete", "validatingadmissionpolicybinding", name, "--ignore-not-found"]);
      await cluster.kubectl(["delete", "validatingadmissionpolicy", name, "--ignore-not-found"]);
    }
  });
});
