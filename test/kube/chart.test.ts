// charts/trackhook against a real API server (the "kube" project's control plane, CRDs applied by
// its globalSetup): the rendered manifests of the default and the full values pass a server-side
// dry run with strict field validation, `helm install` works, and the operator's installed RBAC
// allows what the operator does and nothing it should not (asked of the RBAC authorizer with
// `kubectl auth can-i --as` its ServiceAccount). No controller manager runs, so no pod starts.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useControlPlane } from "../harness/control-plane.ts";
import { chartDir, describeManifest, fullValues, helm, parseManifests, renderText, repoRoot } from "../chart/helm.ts";

const cluster = useControlPlane();

/**
 * A stub of one of prometheus-operator's CRDs (not installed here) with only the fields the chart
 * renders: --validate=strict refuses unknown ones, so the full values' objects are checked too.
 * Not installed where the cluster already has the real one (TRACKHOOK_TEST_KUBECONFIG).
 */
function monitoringCrdStub(kind: string, plural: string, spec: Record<string, unknown>, required: string[] = []) {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${plural}.monitoring.coreos.com` },
    spec: {
      group: "monitoring.coreos.com",
      scope: "Namespaced",
      names: { kind, listKind: `${kind}List`, plural, singular: kind.toLowerCase() },
      versions: [{ name: "v1", served: true, storage: true, schema: { openAPIV3Schema: { type: "object", required, properties: { spec } } } }],
    },
  };
}

/** prometheus-operator's Duration. */
const DURATION = { type: "string", pattern: "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$" };

const SERVICE_MONITOR_STUB = monitoringCrdStub("ServiceMonitor", "servicemonitors", {
  type: "object",
  required: ["selector", "endpoints"],
  properties: {
    selector: {
      type: "object",
      properties: { matchLabels: { type: "object", additionalProperties: { type: "string" } } },
    },
    namespaceSelector: {
      type: "object",
      properties: { any: { type: "boolean" }, matchNames: { type: "array", items: { type: "string" } } },
    },
    endpoints: {
      type: "array",
      minItems: 1,
      items: {
        type: "object",
        properties: {
          port: { type: "string" },
          path: { type: "string" },
          interval: DURATION,
          scrapeTimeout: DURATION,
        },
      },
    },
  },
}, ["spec"]);

const PROMETHEUS_RULE_STUB = monitoringCrdStub("PrometheusRule", "prometheusrules", {
  type: "object",
  properties: {
    groups: {
      type: "array",
      items: {
        type: "object",
        required: ["name", "rules"],
        properties: {
          name: { type: "string" },
          rules: {
            type: "array",
            items: {
              type: "object",
              required: ["alert", "expr"],
              properties: {
                alert: { type: "string" },
                expr: { type: "string" },
                for: DURATION,
                labels: { type: "object", additionalProperties: { type: "string" } },
                annotations: { type: "object", additionalProperties: { type: "string" } },
              },
            },
          },
        },
      },
    },
  },
});

let namespace: string;
let watched: string;
let installed: string;
const release = "th";

async function ensureMonitoringCrds(): Promise<void> {
  for (const stub of [SERVICE_MONITOR_STUB, PROMETHEUS_RULE_STUB]) {
    const existing = await cluster.kubectl(["get", "crd", stub.metadata.name]);
    if (existing.code === 0) continue;
    await cluster.kubectlOk(["apply", "--server-side", "--field-manager=trackhook-chart-test", "-f", "-"], { input: JSON.stringify(stub) });
    await cluster.kubectlOk(["wait", "--for", "condition=established", "--timeout=30s", `crd/${stub.metadata.name}`]);
  }
}

/** Server-side dry run of a rendered stream; returns kubectl's lines, throws with its stderr. */
async function dryRun(manifests: string): Promise<string[]> {
  const result = await cluster.kubectl(["apply", "--dry-run=server", "--validate=strict", "-f", "-"], { input: manifests });
  expect(result.code, `kubectl apply --dry-run=server refused the chart:\n${result.stderr}`).toBe(0);
  expect(result.stderr.trim(), "no warnings (deprecated APIs, unknown fields)").toBe("");
  return result.stdout.trim().split("\n");
}

beforeAll(async () => {
  [namespace, watched, installed] = await Promise.all([cluster.randomNamespace("chart"), cluster.randomNamespace("chart-tenants"), cluster.randomNamespace("chart-install"), ensureMonitoringCrds()]);
});

afterAll(async () => {
  // Cluster-scoped objects (ClusterRole, ClusterRoleBinding) outlive namespaces.
  if (installed) await helm(["uninstall", release, "--namespace", installed, "--wait=false"], { kubeconfig: cluster.kubeconfigPath });
});

describe("the chart on a real API server", () => {
  it("default values: every rendered object passes a server-side dry run with strict validation", async () => {
    const text = await renderText({ release, namespace });
    const docs = parseManifests(text);
    const lines = await dryRun(text);
    expect(lines).toHaveLength(docs.length);
    for (const line of lines) expect(line).toMatch(/ \(server dry run\)$/);
  });

  it("full values (Ingress with three hosts, HPAs, ServiceMonitors and alerts, egress policies, namespace-scoped operator, NATS .creds and mutual TLS): the same", async () => {
    const text = await renderText({ release, namespace, valuesFiles: [fullValues], set: { "operator.watchNamespace": watched } });
    const docs = parseManifests(text);
    expect(new Set(docs.map((d) => d.kind))).toEqual(
      new Set(["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Ingress", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor"]),
    );
    expect(docs.filter((d) => d.metadata.namespace === watched).map(describeManifest).sort()).toEqual(["Role/th-operator", "RoleBinding/th-operator"]);
    const lines = await dryRun(text);
    expect(lines).toHaveLength(docs.length);
  });

  it("the other NATS authentication methods (user and password with a TLS CA, token) pass the same dry run", async () => {
    const variants: Array<Record<string, string>> = [
      { "nats.auth.existingSecret": "nats-login", "nats.tls.existingSecret": "nats-ca" },
      { "nats.auth.existingSecret": "nats-token", "nats.auth.type": "token", "nats.tls.existingSecret": "nats-client", "nats.tls.caKey": "", "nats.tls.clientCert": "true" },
    ];
    for (const set of variants) {
      const text = await renderText({ release, namespace, set });
      expect(text).toMatch(/TRACKHOOK_NATS_(USER|TOKEN)/);
      const lines = await dryRun(text);
      expect(lines).toHaveLength(parseManifests(text).length);
    }
  });

  it("helm install works, and the installed RBAC allows the operator exactly what it needs", async () => {
    const install = await helm(["install", release, chartDir, "--namespace", installed], { kubeconfig: cluster.kubeconfigPath });
    expect(install.code, install.stderr).toBe(0);
    expect(install.stdout).toMatch(/STATUS: deployed/);

    const operator = `system:serviceaccount:${installed}:${release}-trackhook-operator`;
    const dataplane = `system:serviceaccount:${installed}:${release}-trackhook-dataplane`;
    const elsewhere = watched;
    const canI = async (as: string, args: string[]) => {
      const result = await cluster.kubectl(["auth", "can-i", ...args, "--as", as]);
      return result.stdout.trim();
    };
    const checks: Array<[as: string, args: string[], expected: "yes" | "no"]> = [
      // Its resources, in every namespace: read, watch, patch (finalizers) and patch status.
      [operator, ["list", "sources.trackhook.io", "--all-namespaces"], "yes"],
      [operator, ["watch", "webhookdestinations.trackhook.io", "--all-namespaces"], "yes"],
      [operator, ["get", "deletionrequests.trackhook.io", "-n", elsewhere], "yes"],
      [operator, ["patch", "webhookdestinations.trackhook.io", "-n", elsewhere], "yes"],
      [operator, ["patch", "sources.trackhook.io", "--subresource=status", "-n", elsewhere], "yes"],
      [operator, ["patch", "deletionrequests.trackhook.io", "--subresource=status", "-n", elsewhere], "yes"],
      [operator, ["patch", "deletionrequests.trackhook.io", "-n", elsewhere], "no"],
      [operator, ["create", "sources.trackhook.io", "-n", elsewhere], "no"],
      [operator, ["delete", "webhookdestinations.trackhook.io", "-n", elsewhere], "no"],
      [operator, ["update", "sources.trackhook.io", "-n", elsewhere], "no"],
      // Secrets: read only.
      [operator, ["list", "secrets", "--all-namespaces"], "yes"],
      [operator, ["watch", "secrets", "--all-namespaces"], "yes"],
      [operator, ["create", "secrets", "-n", elsewhere], "no"],
      [operator, ["update", "secrets", "-n", elsewhere], "no"],
      [operator, ["patch", "secrets", "-n", elsewhere], "no"],
      [operator, ["delete", "secrets", "-n", elsewhere], "no"],
      // Events on its resources.
      [operator, ["create", "events", "-n", elsewhere], "yes"],
      [operator, ["delete", "events", "-n", elsewhere], "no"],
      // Its Lease, in its own namespace only.
      [operator, ["create", "leases.coordination.k8s.io", "-n", installed], "yes"],
      [operator, ["get", `leases.coordination.k8s.io/${release}-trackhook-operator`, "-n", installed], "yes"],
      [operator, ["update", `leases.coordination.k8s.io/${release}-trackhook-operator`, "-n", installed], "yes"],
      [operator, ["update", "leases.coordination.k8s.io/kube-scheduler", "-n", installed], "no"],
      [operator, ["create", "leases.coordination.k8s.io", "-n", elsewhere], "no"],
      // Nothing else.
      [operator, ["list", "pods", "--all-namespaces"], "no"],
      [operator, ["create", "deployments.apps", "-n", installed], "no"],
      [operator, ["*", "*"], "no"],
      // Ingest and delivery: no API access at all.
      [dataplane, ["get", "secrets", "-n", installed], "no"],
      [dataplane, ["list", "sources.trackhook.io", "-n", installed], "no"],
    ];
    const answers = await Promise.all(checks.map(([as, args]) => canI(as, args)));
    const wrong = checks.map((check, i) => ({ check, answer: answers[i] })).filter(({ check, answer }) => answer !== check[2]);
    expect(wrong.map(({ check, answer }) => `${check[0].split(":").at(-1)} ${check[1].join(" ")}: ${answer}, expected ${check[2]}`)).toEqual([]);
  });

  it("turning an HPA on, and upgrading after it scaled, keep the running pods (found by a review: the Deployment went to 1 replica)", async () => {
    const scaled = await cluster.randomNamespace("chart-hpa");
    const hpaRelease = "th-hpa";
    // Without the operator: no cluster-scoped objects to clash with the other release's.
    const upgrade = async (verb: "install" | "upgrade", set: Record<string, string>) => {
      const result = await helm([verb, hpaRelease, chartDir, "--namespace", scaled, ...(verb === "upgrade" ? ["--reuse-values"] : []), ...Object.entries(set).flatMap(([k, v]) => ["--set", `${k}=${v}`])], { kubeconfig: cluster.kubeconfigPath });
      expect(result.code, result.stderr).toBe(0);
    };
    const replicas = async (component: string) => Number(await cluster.kubectlOk(["get", "deployment", `${hpaRelease}-trackhook-${component}`, "-n", scaled, "-o", "jsonpath={.spec.replicas}"]));
    try {
      await upgrade("install", { "operator.enabled": "false", "ingest.replicas": "3", "delivery.replicas": "2" });
      expect([await replicas("ingest"), await replicas("delivery")]).toEqual([3, 2]);
      await upgrade("upgrade", { "ingest.autoscaling.enabled": "true", "ingest.autoscaling.minReplicas": "2", "delivery.autoscaling.enabled": "true", "delivery.autoscaling.minReplicas": "4" });
      expect([await replicas("ingest"), await replicas("delivery")]).toEqual([3, 4]); // the live count, at least minReplicas
      // What the HPA would do, then an unrelated upgrade.
      await cluster.kubectlOk(["scale", "deployment", `${hpaRelease}-trackhook-ingest`, "-n", scaled, "--replicas=7"]);
      await upgrade("upgrade", { logLevel: "debug" });
      expect(await replicas("ingest")).toBe(7);
    } finally {
      await helm(["uninstall", hpaRelease, "--namespace", scaled, "--wait=false"], { kubeconfig: cluster.kubeconfigPath });
    }
  });

  it("the kind e2e's receiver, Secrets, Source and WebhookDestination pass a server-side dry run", async () => {
    const kind = join(repoRoot, "test", "e2e", "kind");
    const secrets = [
      { apiVersion: "v1", kind: "Secret", metadata: { name: "website-write-key" }, stringData: { writeKey: "k" } },
      { apiVersion: "v1", kind: "Secret", metadata: { name: "receiver-webhook" }, stringData: { sharedSecret: "s" } },
    ];
    const text = [
      readFileSync(join(kind, "receiver.yaml"), "utf8").replace("TRACKHOOK_IMAGE", "trackhook:e2e-test"),
      ...secrets.map((s) => JSON.stringify(s)),
      readFileSync(join(kind, "resources.yaml"), "utf8"),
    ].join("\n---\n");
    const result = await cluster.kubectl(["apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-"], { input: text });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/source\.trackhook\.io\/website created \(server dry run\)/);
    expect(result.stdout).toMatch(/webhookdestination\.trackhook\.io\/receiver created \(server dry run\)/);
  });

  it("the README's Install on Kubernetes resources pass a server-side dry run", async () => {
    const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("## Install on Kubernetes"), readme.indexOf("## Commands"));
    const block = /<<'YAML'\n([\s\S]*?)\nYAML\n/.exec(section)?.[1];
    expect(block, "the section applies its Source and WebhookDestination from a <<'YAML' heredoc").toBeDefined();
    const result = await cluster.kubectl(["apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-"], { input: block });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/source\.trackhook\.io\/website created/);
    expect(result.stdout).toMatch(/webhookdestination\.trackhook\.io\/receiver created/);
  });
});
