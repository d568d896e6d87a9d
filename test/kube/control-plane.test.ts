// The control plane the "kube" project runs against: what operator tests will rely on.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import * as k8s from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { repoRoot, useControlPlane } from "../harness/control-plane.ts";

const cluster = useControlPlane();

function pinnedKubernetesVersion(): string {
  const versions = readFileSync(join(repoRoot, "scripts", "versions.sh"), "utf8");
  const match = /^KUBERNETES_VERSION=(\S+)$/m.exec(versions);
  if (!match) throw new Error("KUBERNETES_VERSION missing in scripts/versions.sh");
  return match[1]!;
}

/** A client authenticating with a bearer token only (no admin client certificate alongside). */
function tokenClient(token: string): k8s.KubeConfig {
  const admin = cluster.kubeConfig();
  const apiCluster = admin.getCurrentCluster();
  if (!apiCluster) throw new Error("kubeconfig has no current cluster");
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [apiCluster],
    users: [{ name: "token", token }],
    contexts: [{ name: "token", cluster: apiCluster.name, user: "token" }],
    currentContext: "token",
  });
  return kc;
}

describe("control plane", () => {
  it.skipIf(cluster.external)("serves the pinned Kubernetes version", async () => {
    const version = JSON.parse(await cluster.kubectlOk(["get", "--raw", "/version"])) as { gitVersion: string };
    expect(version.gitVersion).toBe(`v${pinnedKubernetesVersion()}`);
    expect(pinnedKubernetesVersion()).toBe("1.35.4");
  });

  it("has every CRD of crds/ established", async () => {
    const names = readdirSync(join(repoRoot, "crds"))
      .filter((f) => f.endsWith(".yaml"))
      .map((f) => (parse(readFileSync(join(repoRoot, "crds", f), "utf8")) as { metadata: { name: string } }).metadata.name);
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) {
      const established = await cluster.kubectlOk(["get", "crd", name, "-o", "jsonpath={.status.conditions[?(@.type==\"Established\")].status}"]);
      expect(established, name).toBe("True");
    }
  });

  it("lets the admin create a namespace and a Secret in it", async () => {
    const ns = await cluster.randomNamespace("cp");
    await cluster.kubectlOk(["create", "secret", "generic", "s1", "-n", ns, "--from-literal=token=hunter2"]);
    const secret = JSON.parse(await cluster.kubectlOk(["get", "secret", "s1", "-n", ns, "-o", "json"])) as { data: { token: string } };
    expect(Buffer.from(secret.data.token, "base64").toString()).toBe("hunter2");

    // The same through @kubernetes/client-node, which the operator uses.
    const core = cluster.kubeConfig().makeApiClient(k8s.CoreV1Api);
    const read = await core.readNamespacedSecret({ name: "s1", namespace: ns });
    expect(read.metadata?.namespace).toBe(ns);
  });

  it("enforces RBAC for a non-admin identity", async () => {
    const ns = await cluster.randomNamespace("rbac");
    const other = await cluster.randomNamespace("rbac-other");
    const as = `--as=system:serviceaccount:${ns}:reader`;

    const denied = await cluster.kubectl(["get", "secrets", "-n", ns, as]);
    expect(denied.code).not.toBe(0);
    expect(denied.stderr).toMatch(/forbidden/i);

    await cluster.kubectlOk(["create", "role", "secret-reader", "-n", ns, "--verb=get,list", "--resource=secrets"]);
    await cluster.kubectlOk(["create", "rolebinding", "reader", "-n", ns, "--role=secret-reader", `--serviceaccount=${ns}:reader`]);
    // RBAC is evaluated per request against an informer cache: the grant shows up within moments.
    await expect.poll(async () => (await cluster.kubectl(["get", "secrets", "-n", ns, as])).code, { timeout: 10_000 }).toBe(0);

    const elsewhere = await cluster.kubectl(["get", "secrets", "-n", other, as]);
    expect(elsewhere.code).not.toBe(0);
    expect(elsewhere.stderr).toMatch(/forbidden/i);
  });

  it("issues ServiceAccount tokens that authenticate and are subject to RBAC", async () => {
    const ns = await cluster.randomNamespace("token");
    await cluster.kubectlOk(["create", "serviceaccount", "bot", "-n", ns]);
    // TokenRequest works without a token controller: the API server holds the signing key.
    const token = (await cluster.kubectlOk(["create", "token", "bot", "-n", ns, "--duration=10m"])).trim();
    expect(token.split(".")).toHaveLength(3);

    const kc = tokenClient(token);
    const review = await kc.makeApiClient(k8s.AuthenticationV1Api).createSelfSubjectReview({ body: { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" } });
    expect(review.status?.userInfo?.username).toBe(`system:serviceaccount:${ns}:bot`);
    expect(review.status?.userInfo?.groups).toContain("system:serviceaccounts");

    const secrets = kc.makeApiClient(k8s.CoreV1Api).listNamespacedSecret({ namespace: ns });
    await expect(secrets).rejects.toMatchObject({ code: 403 });
  });
});
