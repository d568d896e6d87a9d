// charts/trackhook without a cluster: helm lint --strict, the schema, and the rendered manifests
// checked for what matters in production (labels, probes, securityContext, resources, RBAC,
// secrets, wiring between objects, the CLI flags the pods are started with). The same manifests
// are applied with a server-side dry run by test/kube/chart.test.ts.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { isMap, isScalar, isSeq, parse, parseDocument, type YAMLMap } from "yaml";
import { NATS_AUTH_ENV } from "../../dataplane/nats/auth.ts";
import { chartDir, describeManifest, fullValues, helm, podSpec, render, renderText, repoRoot, type Manifest } from "./helm.ts";
import { tempDir } from "../harness/temp.ts";

const execFileAsync = promisify(execFile);

const RECOMMENDED_LABELS = [
  "app.kubernetes.io/name",
  "app.kubernetes.io/instance",
  "app.kubernetes.io/version",
  "app.kubernetes.io/managed-by",
  "app.kubernetes.io/part-of",
  "helm.sh/chart",
];
const COMPONENTS = ["operator", "ingest", "delivery"] as const;
const COMMAND_OF = { operator: "operator", ingest: "ingest", delivery: "deliver" } as const;

let defaults: Manifest[];
let full: Manifest[];
let fullClusterWide: Manifest[];
let privateNetworks: Manifest[];
let userPassword: Manifest[];
let token: Manifest[];
let cliHelp: Record<string, string>;

const variants = () => ({ defaults, full, fullClusterWide, privateNetworks, userPassword, token });
const ofKind = (docs: Manifest[], kind: string) => docs.filter((d) => d.kind === kind);
const byName = (docs: Manifest[], kind: string, name: string) => {
  const found = docs.find((d) => d.kind === kind && d.metadata.name === name);
  if (!found) throw new Error(`no ${kind}/${name} among ${docs.map(describeManifest).join(", ")}`);
  return found;
};
const deploymentOf = (docs: Manifest[], component: string) => {
  const found = ofKind(docs, "Deployment").find((d) => d.metadata.labels["app.kubernetes.io/component"] === component);
  if (!found) throw new Error(`no ${component} Deployment`);
  return found;
};
const matches = (selector: Record<string, string>, labels: Record<string, string> = {}) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);
const containersOf = (spec: Manifest): Manifest[] => [...(spec.initContainers ?? []), ...(spec.containers ?? [])];

beforeAll(async () => {
  const cli = async (command: string) => (await execFileAsync(process.execPath, [join(repoRoot, "cli", "main.ts"), command, "--help"])).stdout;
  const commands = Object.values(COMMAND_OF);
  const helps = Promise.all(commands.map(cli));
  [defaults, full, fullClusterWide, privateNetworks, userPassword, token] = await Promise.all([
    render(),
    render({ valuesFiles: [fullValues] }),
    render({ valuesFiles: [fullValues], set: { "operator.watchNamespace": "" } }),
    render({ set: { "delivery.allowPrivateNetworks": "true", "networkPolicy.egress.enabled": "true" } }),
    // The other NATS authentication method (full-values.yaml uses a .creds file), with TLS (CA only).
    render({ set: { "nats.auth.existingSecret": "nats-login", "nats.auth.userKey": "username", "nats.auth.passwordKey": "pass", "nats.tls.existingSecret": "nats-ca", "delivery.streams.replicas": "2", "ingest.stream.replicas": "3" } }),
    render({ set: { "nats.auth.existingSecret": "nats-token", "nats.auth.type": "token", "nats.auth.tokenKey": "t", "ingest.stream.replicas": "3" } }),
  ]);
  const texts = await helps;
  cliHelp = Object.fromEntries(commands.map((c, i) => [c, texts[i]!]));
});

describe("chart metadata and values", () => {
  it("passes helm lint --strict with the default and the full values", async () => {
    const [plain, loaded] = await Promise.all([helm(["lint", "--strict", chartDir]), helm(["lint", "--strict", chartDir, "--values", fullValues])]);
    expect(plain.code, plain.stdout + plain.stderr).toBe(0);
    expect(loaded.code, loaded.stdout + loaded.stderr).toBe(0);
  });

  it("is an apiVersion v2 chart whose appVersion is trackhook's version", () => {
    const chart = parse(readFileSync(join(chartDir, "Chart.yaml"), "utf8"));
    const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8"));
    expect(chart.apiVersion).toBe("v2");
    expect(chart.appVersion).toBe(pkg.version);
  });

  it("ships the CRDs of crds/ byte for byte (npm run generate writes both)", () => {
    const generated = readdirSync(join(repoRoot, "crds")).sort();
    expect(readdirSync(join(chartDir, "crds")).sort()).toEqual(generated);
    for (const file of generated) {
      expect(readFileSync(join(chartDir, "crds", file), "utf8"), `charts/trackhook/crds/${file} differs from crds/${file}: run npm run generate`).toBe(
        readFileSync(join(repoRoot, "crds", file), "utf8"),
      );
    }
  });

  it("carries the repository's licence (Apache-2.0 asks that its text go with every copy)", () => {
    const license = readFileSync(join(repoRoot, "LICENSE"), "utf8");
    expect(license).toContain("Apache License\n                           Version 2.0");
    expect(JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).license).toBe("Apache-2.0");
    expect(readFileSync(join(chartDir, "LICENSE"), "utf8"), "charts/trackhook/LICENSE differs from LICENSE").toBe(license);
  });

  it("comments every value in values.yaml, and documents every value the schema allows", () => {
    const doc = parseDocument(readFileSync(join(chartDir, "values.yaml"), "utf8"));
    const schema = JSON.parse(readFileSync(join(chartDir, "values.schema.json"), "utf8"));
    const uncommented: string[] = [];
    const undocumented: string[] = [];
    // helm-docs' convention: a "# -- " comment documents its key's whole value (a resources or
    // securityContext object); otherwise every leaf needs its own comment.
    const walk = (map: YAMLMap, path: string, schemaNode: Manifest | undefined, documented: boolean) => {
      map.items.forEach((pair, i) => {
        const key = isScalar(pair.key) ? String(pair.key.value) : "?";
        const here = path ? `${path}.${key}` : key;
        const comment = (isScalar(pair.key) ? pair.key.commentBefore : undefined) ?? (i === 0 ? map.commentBefore : undefined);
        const leaf = !isMap(pair.value) || (pair.value as YAMLMap).items.length === 0 || isSeq(pair.value);
        if (leaf && !comment && !documented) uncommented.push(here);
        if (isMap(pair.value)) walk(pair.value as YAMLMap, here, schemaNode?.properties?.[key], documented || /^ ?-- /.test(comment ?? ""));
      });
      if (documented) return;
      for (const property of Object.keys(schemaNode?.properties ?? {})) {
        if (!map.items.some((p) => isScalar(p.key) && p.key.value === property)) undocumented.push(path ? `${path}.${property}` : property);
      }
    };
    walk(doc.contents as YAMLMap, "", schema, false);
    expect(uncommented, "values without a comment").toEqual([]);
    expect(undocumented, "schema properties missing from values.yaml").toEqual([]);
  });

  it("values.schema.json refuses what would break or weaken an install", async () => {
    const refused = async (set: Record<string, string>, message: RegExp) => {
      const args = Object.entries(set).flatMap(([k, v]) => ["--set", `${k}=${v}`]);
      const result = await helm(["template", "x", chartDir, ...args]);
      expect(result.code, `${JSON.stringify(set)} was accepted`).not.toBe(0);
      expect(result.stderr).toMatch(message);
    };
    await Promise.all([
      refused({ "image.tag": "latest" }, /image\/tag/),
      // A tag or digest in the repository rendered "x:1.0:<tag>" (found by a supply-chain review).
      refused({ "image.repository": "reg.example.com/x:1.0" }, /image\/repository/),
      // Less than the operator's 10 s, which it would refuse at start (a crash loop).
      refused({ "operator.deliveryHealthWindow": "9s" }, /deliveryHealthWindow/),
      refused({ "operator.deliveryHealthWindow": "0.1m" }, /deliveryHealthWindow/),
      refused({ "image.repository": "reg.example.com/x@sha256:abc" }, /image\/repository/),
      refused({ "nats.url": "" }, /nats/),
      refused({ "nats.url": "nats://user:secret@nats:4222" }, /nats\/url/),
      refused({ "ingest.stream.maxAge": "3 days" }, /maxAge/),
      // Found by a docs review: ingest refuses a max age under 1m at start (every pod would exit 2),
      // and a WebSocket NATS URL, which the schema let through.
      refused({ "ingest.stream.maxAge": "30s" }, /maxAge/),
      refused({ "ingest.stream.maxAge": "59.9s" }, /maxAge/),
      refused({ "ingest.stream.maxAge": "0.5m" }, /maxAge/),
      refused({ "ingest.stream.maxAge": "59999ms" }, /maxAge/),
      refused({ "nats.url": "wss://nats.example.com:443" }, /nats\/url/),
      refused({ "nats.url": "nats://a:4222\\,ws://b:8080" }, /nats\/url/),
      refused({ "ingest.stream.maxBytes": "lots" }, /maxBytes/),
      refused({ "ingest.stream.replicas": "7" }, /replicas/),
      refused({ "ingest.trustedProxies[0]": "proxy.example.com" }, /trustedProxies/),
      // Ingest refuses a keep-alive timeout under 1s at start.
      refused({ "ingest.keepAliveTimeout": "500ms" }, /keepAliveTimeout/),
      refused({ "ingest.keepAliveTimeout": "0s" }, /keepAliveTimeout/),
      refused({ "ingest.keepAliveTimeout": "10 minutes" }, /keepAliveTimeout/),
      refused({ "ingest.resources.limits": "null" }, /resources/),
      refused({ "delivery.maxInFlight": "0" }, /maxInFlight/),
      refused({ "delivery.allowPrivateNetwork": "true" }, /allowPrivateNetwork/),
      refused({ "delivery.streams.replicas": "7" }, /streams\/replicas/),
      refused({ "delivery.streams.maxBytes": "lots" }, /streams\/maxBytes/),
      // One NATS authentication method at a time; a TLS Secret must provide the CA or a client certificate.
      refused({ "nats.auth.existingSecret": "a", "nats.creds.existingSecret": "c" }, /nats\/creds\/existingSecret/),
      refused({ "nats.auth.existingSecret": "a", "nats.auth.type": "password" }, /nats\/auth\/type/),
      refused({ "nats.auth.existingSecret": "Not_A_Name" }, /nats\/auth\/existingSecret/),
      refused({ "nats.tls.existingSecret": "t", "nats.tls.caKey": "" }, /nats\/tls/),
      refused({ logLevel: "verbose" }, /logLevel/),
      // The operator exits on a resync under 10s: the pod would crash-loop.
      refused({ "operator.resync": "5s" }, /resync/),
      refused({ "operator.resync": "500ms" }, /resync/),
      // The operator exits on a lease under 2s.
      refused({ "operator.leaderElection.leaseDuration": "1s" }, /leaseDuration/),
      refused({ "operator.leaderElection.leaseDuration": "1500ms" }, /leaseDuration/),
      refused({ "operator.leaderElection.leaseDuration": "1s500ms" }, /leaseDuration/),
      refused({ "operator.leaderElection.leaseDuration": "0.02m" }, /leaseDuration/),
      // Found by a review: the operator's ClusterRole, which reads Secrets, was bound to "default".
      refused({ "operator.serviceAccount.create": "false" }, /operator\.serviceAccount\.name/),
    ]);
  });
});

describe("rendered manifests", () => {
  it("render what each values file asks for, and nothing optional by default", () => {
    const kinds = (docs: Manifest[]) => [...new Set(docs.map((d) => d.kind))].sort();
    expect(kinds(defaults)).toEqual(["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"]);
    expect(kinds(full)).toEqual(["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Ingress", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor"]);
    expect(ofKind(full, "Ingress")[0]!.spec.rules.map((r: Manifest) => r.host)).toEqual(["events.example.com", "eu.events.example.com", "us.events.example.com"]);
    expect(ofKind(full, "ServiceMonitor")).toHaveLength(3);
    // No Secret is ever rendered: write keys and shared secrets are the user's, NATS's URL may come from theirs.
    for (const docs of Object.values(variants())) expect(ofKind(docs, "Secret")).toEqual([]);
  });

  it("label every object, and every pod, with the recommended labels", () => {
    for (const [variant, docs] of Object.entries(variants())) {
      for (const m of docs) {
        const labels = m.metadata.labels ?? {};
        for (const label of RECOMMENDED_LABELS) expect(labels[label], `${variant}: ${describeManifest(m)} lacks ${label}`).toBeTruthy();
        expect(labels["app.kubernetes.io/name"]).toBe("trackhook");
        expect(labels["app.kubernetes.io/instance"]).toBe("th-test");
        if (m.metadata.namespace === undefined) expect(["ClusterRole", "ClusterRoleBinding"], `${describeManifest(m)} has no namespace`).toContain(m.kind);
        const pod = m.spec?.template?.metadata;
        if (pod) for (const label of RECOMMENDED_LABELS) expect(pod.labels?.[label], `${variant}: pods of ${describeManifest(m)} lack ${label}`).toBeTruthy();
      }
      for (const component of COMPONENTS) {
        expect(deploymentOf(docs, component).spec.template.metadata.labels["app.kubernetes.io/component"]).toBe(component);
      }
    }
    expect(full.every((m) => m.metadata.labels.team === "data-platform"), "commonLabels on every object").toBe(true);
  });

  it("keep secrets out of ConfigMaps: no secret-looking key or value, and the NATS URL from a Secret stays in the Secret", () => {
    for (const [variant, docs] of Object.entries(variants())) {
      for (const cm of ofKind(docs, "ConfigMap")) {
        for (const [key, value] of Object.entries({ ...cm.data, ...cm.binaryData })) {
          expect(key, `${variant}: ConfigMap key ${key}`).not.toMatch(/secret|password|passwd|token|credential|creds|private|write.?key/i);
          expect(String(value), `${variant}: ConfigMap ${key} has credentials in a URL`).not.toMatch(/\/\/[^/\s]*@/);
          expect(String(value), `${variant}: ConfigMap ${key} looks like a key`).not.toMatch(/BEGIN [A-Z ]*PRIVATE KEY|^[A-Za-z0-9+/=]{40,}$/);
        }
      }
    }
    const cm = ofKind(full, "ConfigMap")[0]!;
    expect(cm.data.TRACKHOOK_NATS_URL).toBeUndefined();
    for (const component of COMPONENTS) {
      const env = deploymentOf(full, component).spec.template.spec.containers[0].env as Manifest[];
      expect(env.find((e) => e.name === "TRACKHOOK_NATS_URL")?.valueFrom?.secretKeyRef, component).toEqual({ name: "trackhook-nats", key: "url" });
    }
    expect(ofKind(defaults, "ConfigMap")[0]!.data.TRACKHOOK_NATS_URL).toBe("nats://nats.nats.svc.cluster.local:4222");
  });

  it("wire NATS authentication and TLS from the user's Secrets: secretKeyRef variables and read-only files", () => {
    const authNames: string[] = Object.values(NATS_AUTH_ENV);
    const natsEnv = (docs: Manifest[], component: string) =>
      Object.fromEntries(((deploymentOf(docs, component).spec.template.spec.containers[0].env ?? []) as Manifest[]).filter((e) => authNames.includes(e.name)).map((e) => [e.name, e.value ?? e.valueFrom]));
    const secretRef = (name: string, key: string) => ({ secretKeyRef: { name, key } });
    const files = { creds: "/etc/trackhook/nats/creds/nats.creds", ca: "/etc/trackhook/nats/tls/ca.crt", cert: "/etc/trackhook/nats/tls/tls.crt", key: "/etc/trackhook/nats/tls/tls.key" };
    for (const component of COMPONENTS) {
      expect(natsEnv(defaults, component), component).toEqual({});
      expect(natsEnv(userPassword, component), component).toEqual({
        [NATS_AUTH_ENV.user]: secretRef("nats-login", "username"),
        [NATS_AUTH_ENV.password]: secretRef("nats-login", "pass"),
        [NATS_AUTH_ENV.ca]: files.ca,
      });
      expect(natsEnv(token, component), component).toEqual({ [NATS_AUTH_ENV.token]: secretRef("nats-token", "t") });
      expect(natsEnv(full, component), component).toEqual({
        [NATS_AUTH_ENV.creds]: files.creds,
        [NATS_AUTH_ENV.ca]: files.ca,
        [NATS_AUTH_ENV.cert]: files.cert,
        [NATS_AUTH_ENV.key]: files.key,
      });
      // Only the keys asked for are mounted, under fixed names, group-readable (fsGroup) only.
      const volumes = (docs: Manifest[]) => (deploymentOf(docs, component).spec.template.spec.volumes as Manifest[]).filter((v) => v.name !== "tmp");
      expect(volumes(full), component).toEqual([
        { name: "nats-creds", secret: { secretName: "trackhook-nats-creds", defaultMode: 0o440, items: [{ key: "trackhook.creds", path: "nats.creds" }] } },
        { name: "nats-tls", secret: { secretName: "trackhook-nats-tls", defaultMode: 0o440, items: [{ key: "ca.crt", path: "ca.crt" }, { key: "tls.crt", path: "tls.crt" }, { key: "tls.key", path: "tls.key" }] } },
      ]);
      expect(volumes(userPassword), component).toEqual([{ name: "nats-tls", secret: { secretName: "nats-ca", defaultMode: 0o440, items: [{ key: "ca.crt", path: "ca.crt" }] } }]);
      for (const docs of [defaults, token]) expect(volumes(docs), component).toEqual([]);
    }

    for (const [variant, docs] of Object.entries(variants())) {
      for (const component of COMPONENTS) {
        const spec = deploymentOf(docs, component).spec.template.spec;
        const container = spec.containers[0] as Manifest;
        const where = `${variant} ${component}`;
        for (const e of (container.env ?? []) as Manifest[]) {
          // Secrets only by reference; file paths point at a file of a read-only mounted Secret volume.
          if ([NATS_AUTH_ENV.user, NATS_AUTH_ENV.password, NATS_AUTH_ENV.token].includes(e.name)) {
            expect(e.value, `${where}: ${e.name} is a literal`).toBeUndefined();
            expect(e.valueFrom.secretKeyRef.name, `${where}: ${e.name}`).toBeTruthy();
          }
          if ([NATS_AUTH_ENV.creds, NATS_AUTH_ENV.ca, NATS_AUTH_ENV.cert, NATS_AUTH_ENV.key].includes(e.name)) {
            const mount = (container.volumeMounts as Manifest[]).find((m) => e.value.startsWith(`${m.mountPath}/`));
            expect(mount?.readOnly, `${where}: ${e.name}=${e.value} is on a read-only mount`).toBe(true);
            const volume = (spec.volumes as Manifest[]).find((v) => v.name === mount!.name)!;
            expect(volume.secret.items.map((i: Manifest) => `${mount!.mountPath}/${i.path}`), `${where}: ${e.name}`).toContain(e.value);
          }
        }
        // The user and password go together; one authentication method at most.
        const names = ((container.env ?? []) as Manifest[]).map((e) => e.name);
        expect(names.includes(NATS_AUTH_ENV.user), where).toBe(names.includes(NATS_AUTH_ENV.password));
        expect([NATS_AUTH_ENV.user, NATS_AUTH_ENV.token, NATS_AUTH_ENV.creds].filter((n) => names.includes(n)).length, where).toBeLessThanOrEqual(1);
        expect(names.includes(NATS_AUTH_ENV.cert), where).toBe(names.includes(NATS_AUTH_ENV.key));
      }
    }
  });

  it("give each component its own NATS user when asked (nats.auth/creds.perComponent), the others the shared one", async () => {
    const docs = await render({ set: { "nats.auth.existingSecret": "shared-login", "nats.auth.perComponent.ingest": "ingest-login", "nats.creds.perComponent.delivery": "delivery-creds" } });
    const env = (component: string) => (deploymentOf(docs, component).spec.template.spec.containers[0].env as Manifest[]).filter((e) => e.name.startsWith("TRACKHOOK_NATS_"));
    expect(env("ingest").map((e) => e.valueFrom?.secretKeyRef?.name)).toEqual(["ingest-login", "ingest-login"]);
    expect(env("operator").map((e) => e.valueFrom?.secretKeyRef?.name)).toEqual(["shared-login", "shared-login"]);
    expect(env("delivery")).toEqual([{ name: "TRACKHOOK_NATS_CREDS", value: "/etc/trackhook/nats/creds/nats.creds" }]);
    expect((deploymentOf(docs, "delivery").spec.template.spec.volumes as Manifest[]).find((v) => v.name === "nats-creds")?.secret.secretName).toBe("delivery-creds");
    expect((deploymentOf(docs, "ingest").spec.template.spec.volumes as Manifest[]).find((v) => v.name === "nats-creds")).toBeUndefined();
    const both = await helm(["template", "x", chartDir, "--set", "nats.auth.perComponent.ingest=a", "--set", "nats.creds.perComponent.ingest=b"]);
    expect(both.code).not.toBe(0);
    expect(both.stderr).toContain("set only one of nats.auth.perComponent.ingest and nats.creds.perComponent.ingest");
  });

  it("keep credentials out of ConfigMaps and command lines", () => {
    const secretish = /password|passwd|token|creds|credential|secret|BEGIN [A-Z ]*KEY|\/\/[^/\s]*@/i;
    for (const [variant, docs] of Object.entries(variants())) {
      for (const cm of ofKind(docs, "ConfigMap")) {
        expect(Object.keys(cm.data ?? {}).filter((k) => k.startsWith("TRACKHOOK_NATS_") && k !== "TRACKHOOK_NATS_URL"), `${variant}: NATS auth in a ConfigMap`).toEqual([]);
      }
      for (const workload of docs.filter(podSpec)) {
        for (const container of containersOf(podSpec(workload)!)) {
          const where = `${variant}: ${describeManifest(workload)} ${container.name}`;
          // What arguments carry, not the names of flags (`--require-secret-label` holds no secret).
          const carried = (arg: string) => (arg.startsWith("--") ? (arg.includes("=") ? arg.slice(arg.indexOf("=") + 1) : "") : arg);
          for (const arg of [...(container.command ?? []), ...(container.args ?? [])]) expect(carried(arg), `${where}: argument ${arg}`).not.toMatch(secretish);
          // No Secret is poured wholesale into the environment.
          expect(((container.envFrom ?? []) as Manifest[]).filter((e) => e.secretRef), where).toEqual([]);
        }
      }
    }
  });

  it("scope the operator to a list of namespaces: a Role and RoleBinding in each, one --watch-namespace (found by a multi-tenant review: one namespace or the whole cluster's Secrets)", async () => {
    const docs = await render({ set: { "operator.watchNamespace": "{team-a,team-b}" } });
    expect(ofKind(docs, "ClusterRole")).toEqual([]);
    const scoped = (kind: string) => ofKind(docs, kind).filter((r) => !r.metadata.name.endsWith("-leader-election")).map((r) => r.metadata.namespace);
    expect(scoped("Role")).toEqual(["team-a", "team-b"]);
    expect(scoped("RoleBinding")).toEqual(["team-a", "team-b"]);
    expect(deploymentOf(docs, "operator").spec.template.spec.containers[0].args).toContain("--watch-namespace=team-a,team-b");
    const named = await render({ release: "trackhook" });
    expect(deploymentOf(named, "operator").spec.template.spec.containers[0].args).toContain("--lease-name=trackhook-operator");
  });

  it("give the operator minimal RBAC: its resources and status, read-only Secrets, Events, its own Lease", () => {
    const rules = (docs: Manifest[], kind: string) =>
      ofKind(docs, kind).flatMap((r) =>
        (r.rules as Manifest[]).map((rule) => ({ ns: r.metadata.namespace, groups: rule.apiGroups, resources: rule.resources, names: rule.resourceNames, verbs: rule.verbs })),
      );
    const expected = [
      { groups: ["trackhook.io"], resources: ["sources", "webhookdestinations"], verbs: ["list", "watch", "patch"] },
      { groups: ["trackhook.io"], resources: ["deletionrequests"], verbs: ["get", "list", "watch"] },
      { groups: ["trackhook.io"], resources: ["sources/status", "webhookdestinations/status", "deletionrequests/status"], verbs: ["patch"] },
      { groups: [""], resources: ["secrets"], verbs: ["get", "list", "watch"] },
      { groups: [""], resources: ["events"], verbs: ["create"] },
    ];
    const leases = [
      { ns: "trackhook", groups: ["coordination.k8s.io"], resources: ["leases"], names: undefined, verbs: ["create"] },
      { ns: "trackhook", groups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "update"] },
    ];
    // Cluster-wide by default; a Role in the watched namespace with operator.watchNamespace.
    // Cluster-wide, it may also read its own three CRDs (to check at start that they are its version's).
    const crds = { ns: undefined, groups: ["apiextensions.k8s.io"], resources: ["customresourcedefinitions"], names: ["sources.trackhook.io", "webhookdestinations.trackhook.io", "deletionrequests.trackhook.io"], verbs: ["get"] };
    expect(rules(defaults, "ClusterRole")).toEqual([...expected.map((r) => ({ ns: undefined, names: undefined, ...r })), crds]);
    // The Lease is the release's own (two releases in one namespace do not share one; found by a
    // multi-tenant review), and trackhook-operator as before for a release named trackhook.
    expect(rules(defaults, "Role")).toEqual([leases[0], { ...leases[1], names: ["th-test-trackhook-operator"] }]);
    expect(deploymentOf(defaults, "operator").spec.template.spec.containers[0].args).toContain("--lease-name=th-test-trackhook-operator");
    expect(ofKind(full, "ClusterRole")).toEqual([]);
    expect(rules(full, "Role")).toEqual([...expected.map((r) => ({ ns: "tenants", names: undefined, ...r })), leases[0], { ...leases[1], names: ["th-operator"] }]);
    expect(rules(fullClusterWide, "ClusterRole")).toHaveLength(expected.length + 1);

    for (const [variant, docs] of Object.entries(variants())) {
      const all = [...rules(docs, "Role"), ...rules(docs, "ClusterRole")];
      for (const rule of all) {
        for (const field of [rule.groups, rule.resources, rule.verbs]) expect(field, `${variant}: wildcard in ${JSON.stringify(rule)}`).not.toContain("*");
        expect(rule.verbs.filter((v: string) => ["escalate", "bind", "impersonate", "delete", "deletecollection"].includes(v)), variant).toEqual([]);
        if (rule.resources.includes("secrets")) expect(rule.verbs.every((v: string) => ["get", "list", "watch"].includes(v)), `${variant}: secrets are read-only`).toBe(true);
        if (rule.resources.includes("leases")) expect(rule.ns, "leases only in the release namespace").toBe("trackhook");
      }
      // Every binding binds the operator's ServiceAccount only, to a role the chart renders.
      const operatorSa = deploymentOf(docs, "operator").spec.template.spec.serviceAccountName;
      for (const binding of [...ofKind(docs, "RoleBinding"), ...ofKind(docs, "ClusterRoleBinding")]) {
        expect(binding.subjects, variant).toEqual([{ kind: "ServiceAccount", name: operatorSa, namespace: "trackhook" }]);
        expect(docs.some((r) => r.kind === binding.roleRef.kind && r.metadata.name === binding.roleRef.name), `${describeManifest(binding)} refers to ${binding.roleRef.name}`).toBe(true);
      }
      // Ingest and delivery have a ServiceAccount with no token and no binding.
      for (const component of ["ingest", "delivery"]) {
        const spec = deploymentOf(docs, component).spec.template.spec;
        expect(spec.automountServiceAccountToken, component).toBe(false);
        expect(byName(docs, "ServiceAccount", spec.serviceAccountName).automountServiceAccountToken).toBe(false);
        expect(spec.serviceAccountName).not.toBe(operatorSa);
      }
    }
  });

  it("set startup, liveness and readiness probes on the health endpoints of every container", () => {
    for (const [variant, docs] of Object.entries(variants())) {
      for (const workload of docs.filter(podSpec)) {
        for (const container of containersOf(podSpec(workload)!)) {
          const where = `${variant}: ${describeManifest(workload)} container ${container.name}`;
          const ports = (container.ports ?? []) as Manifest[];
          for (const [probe, path] of [["startupProbe", "/healthz"], ["livenessProbe", "/healthz"], ["readinessProbe", "/readyz"]] as const) {
            const get = container[probe]?.httpGet;
            expect(get?.path, `${where} ${probe}`).toBe(path);
            expect(ports.some((p) => p.name === get.port || p.containerPort === get.port), `${where} ${probe} port ${get.port} is declared`).toBe(true);
          }
          // The container listens where its probes look (--port).
          const port = ports.find((p) => p.name === container.readinessProbe.httpGet.port)!;
          expect(container.args, where).toContain(`--port=${port.containerPort}`);
        }
      }
    }
    // Every component serves /healthz at once and reports what it waits for on /readyz.
    const startup = (component: string) => {
      const probe = deploymentOf(defaults, component).spec.template.spec.containers[0].startupProbe;
      return probe.periodSeconds * probe.failureThreshold;
    };
    expect(startup("ingest")).toBe(60);
    expect(startup("delivery")).toBe(60);
    expect(startup("operator")).toBe(60);
  });

  it("lock down every pod and container's securityContext, with no host access", () => {
    for (const [variant, docs] of Object.entries(variants())) {
      for (const workload of docs.filter(podSpec)) {
        const spec = podSpec(workload)!;
        const where = `${variant}: ${describeManifest(workload)}`;
        expect(spec.securityContext?.runAsNonRoot, where).toBe(true);
        expect(spec.securityContext?.runAsUser, where).toBeGreaterThan(0);
        expect(spec.securityContext?.seccompProfile?.type, where).toBe("RuntimeDefault");
        for (const field of ["hostNetwork", "hostPID", "hostIPC"]) expect(spec[field], `${where} ${field}`).toBeFalsy();
        expect((spec.volumes ?? []).filter((v: Manifest) => v.hostPath), where).toEqual([]);
        for (const container of containersOf(spec)) {
          const sc = container.securityContext ?? {};
          expect(sc.readOnlyRootFilesystem, `${where} ${container.name}`).toBe(true);
          expect(sc.allowPrivilegeEscalation, `${where} ${container.name}`).toBe(false);
          expect(sc.privileged ?? false, `${where} ${container.name}`).toBe(false);
          expect(sc.capabilities?.drop, `${where} ${container.name}`).toContain("ALL");
          expect(sc.capabilities?.add ?? [], `${where} ${container.name}`).toEqual([]);
          expect(sc.runAsUser ?? spec.securityContext.runAsUser, `${where} ${container.name}`).not.toBe(0);
        }
      }
    }
  });

  it("set CPU and memory requests and limits on every container, and pin every image", () => {
    for (const [variant, docs] of Object.entries(variants())) {
      for (const workload of docs.filter(podSpec)) {
        for (const container of containersOf(podSpec(workload)!)) {
          const where = `${variant}: ${describeManifest(workload)} ${container.name}`;
          for (const kind of ["requests", "limits"]) for (const resource of ["cpu", "memory"]) expect(container.resources?.[kind]?.[resource], `${where} ${kind}.${resource}`).toBeDefined();
          expect(container.image, where).toMatch(/(:[\w][\w.-]*|@sha256:[0-9a-f]{64})$/);
          expect(container.image, where).not.toMatch(/:latest$/);
        }
      }
    }
    expect(deploymentOf(defaults, "ingest").spec.template.spec.containers[0].image).toBe("trackhook:0.3.0-dev");
    expect(deploymentOf(full, "ingest").spec.template.spec.containers[0].image).toMatch(/@sha256:/);
  });

  it("ingest's keep-alive timeout is a value, 72s by default (found by a proxy review: fixed at 72 s, shorter than a GCP load balancer's 600 s: 502s)", async () => {
    const args = (docs: Manifest[]) => deploymentOf(docs, "ingest").spec.template.spec.containers[0].args as string[];
    expect(args(defaults)).toContain("--keep-alive-timeout=72s");
    expect(args(await render({ set: { "ingest.keepAliveTimeout": "650s" } }))).toContain("--keep-alive-timeout=650s");
  });

  it("start each component with flags its `trackhook <command> --help` documents, from the config bucket", () => {
    for (const [variant, docs] of Object.entries(variants())) {
      for (const component of COMPONENTS) {
        const [container] = deploymentOf(docs, component).spec.template.spec.containers as Manifest[];
        const [command, ...flags] = container!.args as string[];
        expect(command, `${variant} ${component}`).toBe(COMMAND_OF[component]);
        for (const flag of flags) {
          const name = flag.split("=")[0]!;
          expect(name, `${variant} ${component}: ${flag} is not a flag`).toMatch(/^--[a-z-]+$/);
          expect(cliHelp[command!], `${variant} ${component}: trackhook ${command} has no ${name}`).toContain(`${name} `);
        }
        if (component !== "operator") expect(flags, component).toContain("--config-from=nats");
      }
    }
    const args = (docs: Manifest[], c: string) => deploymentOf(docs, c).spec.template.spec.containers[0].args as string[];
    expect(args(full, "ingest")).toEqual(expect.arrayContaining([
      "--stream-max-age=96h", "--stream-max-bytes=50GiB", "--stream-replicas=3", "--duplicate-window=30m",
      "--cors-origins=https://www.example.com,https://app.example.com", "--trusted-proxies=10.0.0.0/8,192.168.1.10", "--public-url=https://events.example.com",
    ]));
    expect(args(defaults, "ingest").some((a) => a.startsWith("--cors-origins") || a.startsWith("--trusted-proxies"))).toBe(false);
    expect(args(full, "delivery")).toContain("--max-in-flight=5000");
    // The DLQ and attempts streams: replicas follow the events stream's unless set.
    expect(args(defaults, "delivery")).toEqual(expect.arrayContaining(["--stream-replicas=1", "--stream-max-bytes=1GiB", "--dead-letters-per-destination=0"]));
    expect(args(token, "delivery")).toContain("--stream-replicas=3");
    expect(args(userPassword, "delivery")).toContain("--stream-replicas=2");
    expect(args(full, "delivery")).toEqual(expect.arrayContaining(["--stream-replicas=3", "--stream-max-bytes=5GiB", "--dead-letters-per-destination=200000"]));
    expect(args(defaults, "delivery")).not.toContain("--allow-private-networks");
    expect(args(privateNetworks, "delivery")).toContain("--allow-private-networks");
    // The operator refuses destinations naming private addresses unless delivery may reach them.
    expect(args(defaults, "operator")).not.toContain("--allow-private-networks");
    expect(args(privateNetworks, "operator")).toContain("--allow-private-networks");
    expect(args(full, "operator")).toEqual(expect.arrayContaining(["--watch-namespace=tenants", "--lease-name=th-operator", "--lease-duration=20s", "--config-replicas=3"]));
    expect(args(defaults, "operator").some((a) => a.startsWith("--watch-namespace"))).toBe(false);
    expect(args(defaults, "operator")).not.toContain("--require-secret-label");
    expect(args(full, "operator")).toContain("--require-secret-label");
  });

  it("give the operator its pod name and namespace (Lease identity and namespace) and several replicas", () => {
    for (const docs of [defaults, full]) {
      const operator = deploymentOf(docs, "operator");
      const env = operator.spec.template.spec.containers[0].env as Manifest[];
      expect(env.find((e) => e.name === "POD_NAME")?.valueFrom).toEqual({ fieldRef: { fieldPath: "metadata.name" } });
      expect(env.find((e) => e.name === "POD_NAMESPACE")?.valueFrom).toEqual({ fieldRef: { fieldPath: "metadata.namespace" } });
      expect(operator.spec.replicas).toBeGreaterThanOrEqual(2);
      expect(operator.spec.template.spec.automountServiceAccountToken).toBe(true);
    }
  });

  it("roll the pods when the shared ConfigMap changes, and only then", async () => {
    const checksums = (docs: Manifest[]) => COMPONENTS.map((c) => deploymentOf(docs, c).spec.template.metadata.annotations["checksum/config"] as string);
    const [debug, scaled] = await Promise.all([render({ set: { logLevel: "debug" } }), render({ set: { "ingest.replicas": "5" } })]);
    const base = checksums(defaults);
    expect(new Set(base).size).toBe(1);
    // The annotation is the SHA-256 of the rendered ConfigMap template.
    const cmText = (await renderText()).split(/^---$/m).find((d) => d.includes("# Source: trackhook/templates/configmap.yaml"))!;
    expect(base[0]).toBe(createHash("sha256").update(cmText.replace(/^\n# Source: trackhook\/templates\/configmap.yaml\n/, "").replace(/\n$/, "")).digest("hex"));
    for (const sum of checksums(debug)) expect(sum).not.toBe(base[0]);
    expect(checksums(scaled)).toEqual(base);
  });

  it("wire objects together: Services, PDBs, HPAs, NetworkPolicies and ServiceMonitors select the right pods and ports", () => {
    for (const [variant, docs] of Object.entries(variants())) {
      const deployments = ofKind(docs, "Deployment");
      const podsOf = (selector: Record<string, string>) => deployments.filter((d) => matches(selector, d.spec.template.metadata.labels));
      const containerPorts = (d: Manifest) => (d.spec.template.spec.containers as Manifest[]).flatMap((c) => c.ports ?? []) as Manifest[];
      for (const d of deployments) expect(matches(d.spec.selector.matchLabels, d.spec.template.metadata.labels), `${variant}: ${describeManifest(d)} selects its pods`).toBe(true);
      for (const svc of ofKind(docs, "Service")) {
        const targets = podsOf(svc.spec.selector);
        expect(targets, `${variant}: ${describeManifest(svc)} selects one Deployment`).toHaveLength(1);
        for (const port of svc.spec.ports) expect(containerPorts(targets[0]!).some((p) => p.name === port.targetPort), `${describeManifest(svc)} ${port.targetPort}`).toBe(true);
      }
      for (const pdb of ofKind(docs, "PodDisruptionBudget")) expect(podsOf(pdb.spec.selector.matchLabels), `${variant}: ${describeManifest(pdb)}`).toHaveLength(1);
      for (const np of ofKind(docs, "NetworkPolicy")) {
        const [target] = podsOf(np.spec.podSelector.matchLabels);
        expect(target, `${variant}: ${describeManifest(np)} selects a Deployment`).toBeDefined();
        for (const rule of np.spec.ingress) for (const port of rule.ports) expect(containerPorts(target!).map((p) => p.containerPort), describeManifest(np)).toContain(port.port);
      }
      for (const hpa of ofKind(docs, "HorizontalPodAutoscaler")) {
        const target = byName(docs, "Deployment", hpa.spec.scaleTargetRef.name);
        // Without a cluster to look up the live count in: the HPA's least (test/kube/chart.test.ts has the rest).
        expect(target.spec.replicas, `${variant}: ${describeManifest(target)} starts at its HPA's minReplicas`).toBe(hpa.spec.minReplicas);
        expect(hpa.spec.minReplicas).toBeLessThanOrEqual(hpa.spec.maxReplicas);
      }
      for (const ingress of ofKind(docs, "Ingress")) {
        for (const rule of ingress.spec.rules) {
          for (const path of rule.http.paths) {
            // ingest serves /metrics, /healthz and /readyz on its API port: only the SDK routes
            // (/v1) and analytics.js (/analytics.js, /analytics-next) go public.
            expect(path.path, `${variant}: Ingress path`).toMatch(/^\/(v1|analytics\.js|analytics-next)(\/|$)/);
            const svc = byName(docs, "Service", path.backend.service.name);
            expect(svc.metadata.labels["app.kubernetes.io/component"]).toBe("ingest");
            expect(svc.spec.ports.map((p: Manifest) => p.name)).toContain(path.backend.service.port.name);
          }
        }
      }
      for (const sm of ofKind(docs, "ServiceMonitor")) {
        const services = ofKind(docs, "Service").filter((s) => matches(sm.spec.selector.matchLabels, s.metadata.labels));
        expect(services, `${variant}: ${describeManifest(sm)}`).toHaveLength(1);
        for (const endpoint of sm.spec.endpoints) {
          expect(services[0]!.spec.ports.map((p: Manifest) => p.name)).toContain(endpoint.port);
          expect(endpoint.path).toBe("/metrics");
        }
      }
    }
  });

  it("NetworkPolicies: ingress only on each component's port; egress to private networks only when delivery may reach them", () => {
    for (const [variant, docs] of Object.entries(variants())) {
      const nps = ofKind(docs, "NetworkPolicy");
      expect(nps.map((np) => np.metadata.labels["app.kubernetes.io/component"]).sort(), variant).toEqual(["delivery", "ingest", "operator"]);
      for (const np of nps) expect(np.spec.ingress, `${variant}: ${describeManifest(np)}`).toHaveLength(1);
    }
    const deliveryEgress = (docs: Manifest[]) => ofKind(docs, "NetworkPolicy").find((np) => np.metadata.labels["app.kubernetes.io/component"] === "delivery")!.spec.egress as Manifest[];
    const blocks = (docs: Manifest[]) => deliveryEgress(docs).flatMap((r) => (r.to ?? []).map((t: Manifest) => t.ipBlock).filter(Boolean));
    expect(ofKind(defaults, "NetworkPolicy").every((np) => np.spec.egress === undefined), "egress is opt-in").toBe(true);
    expect(blocks(full).find((b: Manifest) => b.cidr === "0.0.0.0/0").except).toEqual(expect.arrayContaining(["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8"]));
    expect(blocks(privateNetworks).every((b: Manifest) => b.except === undefined)).toBe(true);
    const operatorEgress = ofKind(full, "NetworkPolicy").find((np) => np.metadata.labels["app.kubernetes.io/component"] === "operator")!.spec.egress as Manifest[];
    expect(operatorEgress.some((r) => r.to?.some((t: Manifest) => t.ipBlock?.cidr === "172.18.0.2/32"))).toBe(true);
  });

  it("delivery.egressProxy: the proxy's URL from a Secret (or url), the noProxy hosts, and an egress rule to the proxy", async () => {
    const env = (docs: Manifest[], component = "delivery") => deploymentOf(docs, component).spec.template.spec.containers[0].env as Manifest[] | undefined;
    expect(env(full)).toEqual(expect.arrayContaining([
      { name: "TRACKHOOK_EGRESS_PROXY", valueFrom: { secretKeyRef: { name: "egress-proxy", key: "url" } } },
      { name: "TRACKHOOK_EGRESS_NO_PROXY", value: "hooks.internal.example,.corp.example" },
    ]));
    for (const component of ["ingest", "operator"]) expect(JSON.stringify(env(full, component) ?? []), component).not.toContain("EGRESS");
    expect((env(defaults) ?? []).filter((e) => String(e.name).startsWith("TRACKHOOK_EGRESS"))).toEqual([]);
    const plain = await render({ set: { "delivery.egressProxy.url": "http://proxy.example:3128" } });
    expect(env(plain)).toEqual(expect.arrayContaining([{ name: "TRACKHOOK_EGRESS_PROXY", value: "http://proxy.example:3128" }]));
    // The rule's port is the url's when it has one (or its scheme's), else delivery.egressProxy.port.
    for (const [url, port] of [["http://[fd00::5]:8080", 8080], ["https://proxy.example", 443], ["http://proxy.example", 80]] as const) {
      const docs = await render({ set: { "delivery.egressProxy.url": url, "networkPolicy.egress.enabled": "true", "delivery.egressProxy.networkPolicyPeers[0].ipBlock.cidr": "10.20.0.5/32" } });
      const rules = ofKind(docs, "NetworkPolicy").find((np) => np.metadata.labels["app.kubernetes.io/component"] === "delivery")!.spec.egress as Manifest[];
      expect(rules, url).toContainEqual({ to: [{ ipBlock: { cidr: "10.20.0.5/32" } }], ports: [{ port, protocol: "TCP" }] });
    }
    const deliveryEgress = ofKind(full, "NetworkPolicy").find((np) => np.metadata.labels["app.kubernetes.io/component"] === "delivery")!.spec.egress as Manifest[];
    expect(deliveryEgress).toContainEqual({ to: [{ ipBlock: { cidr: "10.20.0.5/32" } }], ports: [{ port: 3128, protocol: "TCP" }] });
    // Refused at install: credentials in values (they belong in the Secret), both sources, noProxy alone.
    for (const [set, why] of [
      [["delivery.egressProxy.url=http://user:pw@proxy.example:3128"], /egressProxy\/url|does not match pattern/],
      [["delivery.egressProxy.url=http://proxy:3128", "delivery.egressProxy.existingSecret.name=p"], /set only one of delivery.egressProxy.url and delivery.egressProxy.existingSecret.name/],
      [["delivery.egressProxy.noProxy[0]=internal.example"], /noProxy lists hosts that bypass a proxy/],
      [["delivery.egressProxy.url=http://:3128"], /does not match pattern/],
      [["delivery.egressProxy.url=http://proxy:3128", "delivery.egressProxy.noProxy[0]=example.com."], /does not match pattern/],
      // An egress policy with a proxy it does not let delivery reach.
      [["delivery.egressProxy.url=http://proxy:3128", "networkPolicy.egress.enabled=true"], /set delivery.egressProxy.networkPolicyPeers/],
    ] as const) {
      const result = await helm(["template", "x", chartDir, ...set.flatMap((s) => ["--set", s])]);
      expect(result.code, set.join(" ")).not.toBe(0);
      expect(result.stderr, set.join(" ")).toMatch(why);
    }
  });

  it("NetworkPolicies: a restricted ingest port still admits the metrics scrapers (it serves /metrics too)", () => {
    const ingestFrom = (docs: Manifest[]) => ofKind(docs, "NetworkPolicy").find((np) => np.metadata.labels["app.kubernetes.io/component"] === "ingest")!.spec.ingress[0].from as Manifest[] | undefined;
    const namespaces = (peers: Manifest[] | undefined) => (peers ?? []).map((p) => p.namespaceSelector?.matchLabels?.["kubernetes.io/metadata.name"]);
    expect(namespaces(ingestFrom(full))).toEqual(["ingress-nginx", "monitoring"]);
    expect(ingestFrom(defaults), "unrestricted by default: the public API").toBeUndefined();
  });

  it("NetworkPolicies: restricting ingest with the default metricsFrom (any pod) keeps it restricted", async () => {
    const docs = await render({ set: { "networkPolicy.ingestFrom[0].namespaceSelector.matchLabels.team": "edge" } });
    const ingest = ofKind(docs, "NetworkPolicy").find((np) => np.metadata.labels["app.kubernetes.io/component"] === "ingest")!;
    expect(ingest.spec.ingress[0].from).toEqual([{ namespaceSelector: { matchLabels: { team: "edge" } } }]);
  });

  it("the default Ingress routes the SDK routes and analytics.js, and nothing else of ingest's port", async () => {
    const docs = await render({ set: { "ingest.ingress.enabled": "true" } });
    const [ingress] = ofKind(docs, "Ingress");
    expect(ingress!.spec.rules.map((r: Manifest) => r.http.paths.map((p: Manifest) => `${p.pathType} ${p.path}`))).toEqual([
      ["Prefix /v1", "Prefix /analytics.js", "Prefix /analytics-next"],
    ]);
  });

  it("NOTES.txt tells how to create a Source and send a first event", async () => {
    const result = await helm(["install", "th-test", chartDir, "--namespace", "trackhook", "--dry-run=client"]);
    expect(result.code, result.stderr).toBe(0);
    const notes = result.stdout.slice(result.stdout.indexOf("NOTES:"));
    expect(notes).toContain("kind: Source");
    expect(notes).toContain("create secret generic website-write-key");
    expect(notes).toContain("port-forward svc/th-test-trackhook-ingest 8080:80");
    expect(notes).toMatch(/curl -u "\$KEY:" "\$URL\/v1\/track"/);
    expect(notes).not.toContain("trackhook.io/secret=true");
    // Found by a review: with requireSecretLabel the Source never became Ready.
    const labelled = await helm(["install", "th-test", chartDir, "--namespace", "trackhook", "--dry-run=client", "--set", "operator.requireSecretLabel=true"]);
    const labelledNotes = labelled.stdout.slice(labelled.stdout.indexOf("NOTES:"));
    expect(labelledNotes).toContain("label secret website-write-key trackhook.io/secret=true");
    // Every kind of Secret reference a destination has, whatever the line wrapping.
    expect(labelledNotes.replace(/\s+/g, " ")).toContain("(sharedSecretRef, additionalSharedSecretRefs, header values) trackhook.io/secret=true");
    // Found by a docs review: a list printed as "kubectl -n [team-a team-b]", which fails pasted.
    const teams = await helm(["install", "th-test", chartDir, "--namespace", "trackhook", "--dry-run=client", "--set", "operator.watchNamespace={team-a,team-b}"]);
    const teamNotes = teams.stdout.slice(teams.stdout.indexOf("NOTES:"));
    expect(teamNotes).toContain("kubectl -n team-a create secret generic website-write-key");
    expect(teamNotes).toContain("this operator watches only team-a, team-b");
    expect(teamNotes).not.toContain("[");
  });

  it("NOTES.txt's step 2 runs pasted into a shell, and applies the Source it shows (regression: an indented heredoc end never ended it)", async () => {
    const result = await helm(["install", "th-test", chartDir, "--namespace", "trackhook", "--dry-run=client"]);
    const notes = result.stdout.slice(result.stdout.indexOf("NOTES:"));
    const step = notes.slice(notes.indexOf("\n2. "), notes.indexOf("\n3. ")).split("\n").slice(2).join("\n");
    // kubectl and openssl stand-ins that record what they are given, stdin included.
    const dir = tempDir("notes");
    const script = `kubectl() { echo "kubectl $*" >> ${dir}/calls; if [ "$*" = "-n default apply -f -" ]; then cat > ${dir}/applied.yaml; fi; }\nopenssl() { echo 0123; }\n${step}\n`;
    const { stdout, stderr } = await promisify(execFile)("bash", ["-euc", script]);
    expect(stderr).toBe("");
    expect(stdout).toBe("");
    expect(readFileSync(join(dir, "calls"), "utf8").trim().split("\n")).toEqual([
      `kubectl -n default create secret generic website-write-key --from-literal=writeKey=0123`,
      "kubectl -n default apply -f -",
      "kubectl -n default wait --for=condition=Ready source/website",
    ]);
    expect(parse(readFileSync(join(dir, "applied.yaml"), "utf8"))).toEqual({
      apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name: "website" }, spec: { writeKeySecretRef: { name: "website-write-key", key: "writeKey" } },
    });
  });

  it("renders values kept from an older release (helm upgrade --reuse-values: no metrics.prometheusRule; regression: nil pointer)", async () => {
    const docs = await render({ set: { "metrics.prometheusRule": "null" } });
    expect(ofKind(docs, "PrometheusRule")).toEqual([]);
    expect(ofKind(docs, "Deployment")).toHaveLength(3);
  });

  it("NOTES.txt warns when ingest's port is restricted and nothing admits Prometheus to its /metrics (metricsFrom no longer does)", async () => {
    const notes = async (...set: string[]) => {
      const result = await helm(["install", "th-test", chartDir, "--namespace", "trackhook", "--dry-run=client", ...set.flatMap((s) => ["--set", s])]);
      expect(result.code, result.stderr).toBe(0);
      return result.stdout.slice(result.stdout.indexOf("NOTES:"));
    };
    const restricted = "networkPolicy.ingestFrom[0].podSelector.matchLabels.app=nginx";
    expect(await notes(restricted)).toContain("set networkPolicy.ingestMetricsFrom");
    expect(await notes(restricted, "networkPolicy.ingestMetricsFrom[0].namespaceSelector.matchLabels.name=monitoring")).not.toContain("ingestMetricsFrom");
    expect(await notes()).not.toContain("ingestMetricsFrom");
  });

  it("NOTES.txt warns when an Ingress is made and no proxy is trusted (found by a proxy review: every message's context.ip was the ingress controller's pod)", async () => {
    const notes = async (...set: string[]) => {
      const result = await helm(["install", "th-test", chartDir, "--namespace", "trackhook", "--dry-run=client", ...set.flatMap((s) => ["--set", s])]);
      expect(result.code, result.stderr).toBe(0);
      return result.stdout.slice(result.stdout.indexOf("NOTES:"));
    };
    const warning = "ingest.ingress.enabled is true and ingest.trustedProxies is empty";
    expect(await notes("ingest.ingress.enabled=true")).toContain(warning);
    expect(await notes("ingest.ingress.enabled=true", "ingest.trustedProxies={10.244.0.0/16}")).not.toContain(warning);
    expect(await notes()).not.toContain(warning);
  });

  it("mounts extra volumes where asked, as docs/receiving-webhooks.md does to trust a private CA", async () => {
    const dir = tempDir("chart-ca");
    const values = join(dir, "values.yaml");
    writeFileSync(values, `delivery:
  extraEnv:
    - { name: NODE_EXTRA_CA_CERTS, value: /etc/trackhook/ca/ca.crt }
  extraVolumes:
    - { name: private-ca, configMap: { name: private-ca } }
  extraVolumeMounts:
    - { name: private-ca, mountPath: /etc/trackhook/ca, readOnly: true }
`);
    try {
      const docs = await render({ valuesFiles: [values] });
      const pod = deploymentOf(docs, "delivery").spec.template.spec;
      expect(pod.volumes).toContainEqual({ name: "private-ca", configMap: { name: "private-ca" } });
      expect(pod.containers[0].volumeMounts).toContainEqual({ name: "private-ca", mountPath: "/etc/trackhook/ca", readOnly: true });
      expect(pod.containers[0].env).toContainEqual({ name: "NODE_EXTRA_CA_CERTS", value: "/etc/trackhook/ca/ca.crt" });
      // The other components are left as they were.
      expect(JSON.stringify(deploymentOf(docs, "ingest").spec.template.spec)).not.toContain("private-ca");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the README's helm install command renders (its --set values pass the schema)", async () => {
    const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("## Install on Kubernetes"), readme.indexOf("## Commands"));
    const command = /^helm install trackhook charts\/trackhook(?:[^\n]*\\\n)*[^\n]*/m.exec(section)?.[0];
    expect(command, "the section has a helm install of charts/trackhook").toBeDefined();
    const set = Object.fromEntries([...command!.matchAll(/--set ([\w.]+)=(\S+)/g)].map((m) => [m[1]!, m[2]!.replace("$IMAGE", "registry.example.com/platform/trackhook").replace("$TAG", "0.2.0-abc1234")]));
    expect(Object.keys(set)).toContain("nats.url");
    const docs = await render({ release: "trackhook", set });
    const ingest = deploymentOf(docs, "ingest");
    expect(ingest.metadata.name).toBe("trackhook-ingest");
    expect(ingest.spec.template.spec.containers[0].image).toBe("registry.example.com/platform/trackhook:0.2.0-abc1234");
  });
});
