// What a user of crds/ gets from a real API server, without the operator running: the kinds are
// discoverable (short names, `kubectl get trackhook`, printer columns), bad objects are refused
// with messages that name the field, defaults are filled in, and `kubectl explain` documents every
// field. The messages asserted here are the API server's own (v1.35); keep to their stable parts.
import { beforeAll, describe, expect, it } from "vitest";
import { useControlPlane } from "../harness/control-plane.ts";

const cluster = useControlPlane();
const API_VERSION = "trackhook.io/v1alpha1";
const CRD_NAMES = ["sources.trackhook.io", "webhookdestinations.trackhook.io", "deletionrequests.trackhook.io"];

type Json = Record<string, unknown>;

const source = (name: string, spec: Json = { writeKeySecretRef: { name: "keys", key: "web" } }) => ({
  apiVersion: API_VERSION,
  kind: "Source",
  metadata: { name },
  spec,
});
const destination = (name: string, spec: Json) => ({ apiVersion: API_VERSION, kind: "WebhookDestination", metadata: { name }, spec });
const deletionRequest = (name: string, spec: Json) => ({ apiVersion: API_VERSION, kind: "DeletionRequest", metadata: { name }, spec });
/** The smallest valid destination spec; cases below spread it and change one thing. */
const minimalDestination = { sources: ["web"], urls: ["https://hooks.example.com/in"] };

/** One namespace for the whole file: every test creates objects under its own names. */
let ns: string;
beforeAll(async () => {
  ns = await cluster.randomNamespace("crds");
});

/** `kubectl <verb> -f -` with the object as JSON (which is YAML too). */
const withObject = (args: string[], object: unknown) => cluster.kubectl([...args, "-n", ns, "-f", "-"], { input: JSON.stringify(object) });

/** Creates the object for real and returns it as the API server stored it (defaults applied). */
async function create(object: unknown): Promise<Json> {
  const result = await withObject(["create", "-o", "json"], object);
  if (result.code !== 0) throw new Error(`create failed: ${result.stderr}`);
  return JSON.parse(result.stdout) as Json;
}

/** Sends the object through admission and validation without storing it; returns the refusal. */
async function rejection(object: unknown): Promise<string> {
  const result = await withObject(["apply", "--dry-run=server"], object);
  expect(result.code, `expected a refusal, got: ${result.stdout}`).not.toBe(0);
  return result.stderr;
}

async function crds(): Promise<Json[]> {
  const list = JSON.parse(await cluster.kubectlOk(["get", "crd", ...CRD_NAMES, "-o", "json"])) as { items: Json[] };
  return list.items;
}

/** The header row of `kubectl get <resource>` (kubectl prints none for an empty list). */
async function columns(resource: string, ...flags: string[]): Promise<string[]> {
  const table = await cluster.kubectlOk(["get", resource, "-n", ns, ...flags]);
  return table.split("\n")[0]!.trim().split(/\s+/);
}

describe("CRDs: discovery and kubectl get", () => {
  it("serves all three kinds, established, with short names, category trackhook and a status subresource", async () => {
    const byKind = new Map<string, Json>();
    for (const crd of await crds()) {
      const spec = crd.spec as { names: { kind: string } };
      byKind.set(spec.names.kind, crd);
    }
    expect([...byKind.keys()].sort()).toEqual(["DeletionRequest", "Source", "WebhookDestination"]);

    const shortNames = { Source: "src", WebhookDestination: "whd", DeletionRequest: "delreq" };
    for (const [kind, shortName] of Object.entries(shortNames)) {
      const crd = byKind.get(kind) as {
        spec: { names: { shortNames: string[]; categories: string[] }; versions: Array<{ name: string; subresources?: { status?: object } }> };
        status: { conditions: Array<{ type: string; status: string }> };
      };
      expect(crd.status.conditions.find((c) => c.type === "Established")?.status, kind).toBe("True");
      expect(crd.spec.names.shortNames, kind).toContain(shortName);
      expect(crd.spec.names.categories, kind).toEqual(["trackhook"]);
      expect(crd.spec.versions.map((v) => v.name), kind).toEqual(["v1alpha1"]);
      expect(crd.spec.versions[0]!.subresources?.status, kind).toEqual({});
    }

    // Discovery is what makes `kubectl get src` work; the CRD spec alone does not prove it is served.
    const resources = await cluster.kubectlOk(["api-resources", "--api-group=trackhook.io", "-o", "name"]);
    expect(resources.trim().split("\n").sort()).toEqual(["deletionrequests.trackhook.io", "sources.trackhook.io", "webhookdestinations.trackhook.io"]);
  });

  it("lists every kind with `kubectl get trackhook` and resolves the short names", async () => {
    await create(source("listed"));
    await create(destination("listed", minimalDestination));
    await create(deletionRequest("listed", { userIds: ["u1"] }));

    const all = await cluster.kubectlOk(["get", "trackhook", "-n", ns, "-o", "name"]);
    expect(all.trim().split("\n")).toEqual(
      expect.arrayContaining(["source.trackhook.io/listed", "webhookdestination.trackhook.io/listed", "deletionrequest.trackhook.io/listed"]),
    );
    for (const [shortName, kind] of [["src", "source"], ["whd", "webhookdestination"], ["delreq", "deletionrequest"]]) {
      expect(await cluster.kubectlOk(["get", shortName!, "listed", "-n", ns, "-o", "name"])).toBe(`${kind}.trackhook.io/listed\n`);
    }
  });

  it("shows Ready, Reason and a per-kind column in `kubectl get`", async () => {
    await create(source("columns"));
    await create(destination("columns", minimalDestination));
    await create(deletionRequest("columns", { userIds: ["u1"] }));

    expect(await columns("sources")).toEqual(["NAME", "READY", "REASON", "ENABLED", "AGE"]);
    expect(await columns("webhookdestinations")).toEqual(["NAME", "READY", "REASON", "DELIVERY", "URLS", "AGE"]);
    // The resolved source list is long: only in -o wide.
    expect(await columns("webhookdestinations", "-o", "wide")).toEqual(["NAME", "READY", "REASON", "DELIVERY", "URLS", "SOURCES", "MESSAGE", "AGE"]);
    expect(await columns("sources", "-o", "wide")).toEqual(["NAME", "READY", "REASON", "ENABLED", "RATE-LIMIT", "MESSAGE", "AGE"]);
    // No SOURCES: a printer column shows only the first of a list of objects (one source of ten).
    expect(await columns("deletionrequests", "-o", "wide")).toEqual(["NAME", "STATE", "READY", "REASON", "MESSAGE", "AGE"]);
    expect(await columns("deletionrequests")).toEqual(["NAME", "STATE", "READY", "REASON", "AGE"]);
  });

  it("keeps conditions a map keyed by type, with CamelCase reasons, as metav1.Condition", async () => {
    await create(source("conditions"));
    const ready = { type: "Ready", status: "True", reason: "Reconciled", message: "", lastTransitionTime: "2026-01-01T00:00:00Z" };
    const patch = (conditions: unknown[]) =>
      cluster.kubectl(["patch", "source", "conditions", "-n", ns, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: { conditions } })]);
    const twice = await patch([ready, { ...ready, status: "False" }]);
    expect(twice.code).not.toBe(0);
    expect(twice.stderr).toMatch(/Duplicate value/);
    const badReason = await patch([{ ...ready, reason: "not camel case" }]);
    expect(badReason.stderr).toContain("status.conditions[0].reason");
    expect((await patch([ready])).code).toBe(0);
  });

  it("keeps status apart from spec: only the status subresource writes it, without a new generation", async () => {
    // A status sent with the object is dropped: only the operator's status writes count.
    const created = await create({ ...source("status"), status: { conditions: [{ type: "Ready", status: "True", reason: "Forged", message: "", lastTransitionTime: "2026-01-01T00:00:00Z" }] } });
    expect(created.status).toBeUndefined();

    const ready = { type: "Ready", status: "True", reason: "SecretFound", message: "write key loaded", lastTransitionTime: "2026-01-01T00:00:00Z" };
    await cluster.kubectlOk(["patch", "source", "status", "-n", ns, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: { conditions: [ready] } })]);

    const row = (await cluster.kubectlOk(["get", "source", "status", "-n", ns, "--no-headers"])).trim().split(/\s+/);
    expect(row.slice(0, 4)).toEqual(["status", "True", "SecretFound", "true"]);
    // Status writes must not look like spec changes, or observedGeneration could never catch up.
    expect(await cluster.kubectlOk(["get", "source", "status", "-n", ns, "-o", "jsonpath={.metadata.generation}"])).toBe("1");
  });
});

describe("CRDs: invalid objects are refused with a message naming the field", () => {
  // The API server skips CEL rules while an object has "blocking" schema errors (too many items,
  // a required field missing) and adds its own line about it: "<nil>: Invalid value: null: some
  // validation rules were not checked because the object was invalid; ...". Expected, not ours.

  it("WebhookDestination: more than five URLs", async () => {
    const urls = Array.from({ length: 6 }, (_, i) => `https://hooks.example.com/${i}`);
    expect(await rejection(destination("six-urls", { ...minimalDestination, urls }))).toContain(
      "spec.urls: Too many: 6: must have at most 5 items",
    );
  });

  it("WebhookDestination: a URL that is not http or https", async () => {
    const stderr = await rejection(destination("ftp", { ...minimalDestination, urls: ["ftp://files.example.com/in"] }));
    // Both the schema pattern and the CEL rule fire; the CEL message is the one a human reads.
    expect(stderr).toContain(`spec.urls[0]: Invalid value: "ftp://files.example.com/in"`);
    expect(stderr).toContain("spec.urls: Invalid value: every URL must be an http or https URL");
  });

  it("WebhookDestination: a URL with credentials in it", async () => {
    const stderr = await rejection(destination("userinfo", { ...minimalDestination, urls: ["https://user:pw@hooks.example.com/in"] }));
    expect(stderr).toContain(`spec.urls[0]: Invalid value: "https://user:pw@hooks.example.com/in"`);
    expect(stderr).toContain("spec.urls: Invalid value: a URL carries no credentials (user:password@): send them in headers, valueFrom a Secret");
  });

  it("WebhookDestination: a duration that is no duration gets one error, the pattern's (found by a GitOps review: a second one spoke of google.protobuf.Duration)", async () => {
    const stderr = await rejection(destination("words", { ...minimalDestination, timeout: "5 seconds", retryWindow: "7d" }));
    expect(stderr).toContain(`spec.timeout: Invalid value: "5 seconds"`);
    expect(stderr).toContain(`spec.retryWindow: Invalid value: "7d"`);
    expect(stderr).not.toMatch(/type conversion|google\.protobuf/);
    // A duration out of bounds still gets the bounds' message.
    expect(await rejection(destination("long", { ...minimalDestination, timeout: "31s" }))).toContain("spec.timeout: Invalid value: \"31s\": must be from 1s to 30s");
  });

  it("WebhookDestination: both sources and sourceSelector, or neither", async () => {
    const message = "spec: Invalid value: exactly one of sources or sourceSelector must be set";
    expect(await rejection(destination("both", { ...minimalDestination, sourceSelector: { matchLabels: { team: "web" } } }))).toContain(message);
    expect(await rejection(destination("neither", { urls: minimalDestination.urls }))).toContain(message);
  });

  it("WebhookDestination: standardWebhooks without sharedSecretRef", async () => {
    expect(await rejection(destination("std-no-secret", { ...minimalDestination, standardWebhooks: true }))).toContain(
      "spec.standardWebhooks: Invalid value: standardWebhooks needs sharedSecretRef: the secret is the signature's key",
    );
  });

  it("WebhookDestination: additionalSharedSecretRefs without standardWebhooks, or more than four", async () => {
    const signed = { ...minimalDestination, sharedSecretRef: { name: "hook", key: "new" } };
    const old = { name: "hook", key: "old" };
    expect(await rejection(destination("additional-no-std", { ...signed, additionalSharedSecretRefs: [old] }))).toContain(
      "spec.additionalSharedSecretRefs: Invalid value: additionalSharedSecretRefs needs standardWebhooks: true: only webhook-signature carries several signatures",
    );
    expect(await rejection(destination("additional-five", { ...signed, standardWebhooks: true, additionalSharedSecretRefs: [old, old, old, old, old] }))).toMatch(
      /spec.additionalSharedSecretRefs: Too many: 5: must have at most 4 items/,
    );
    // An empty list asks for nothing: accepted without standardWebhooks.
    expect(await create(destination("additional-empty", { ...signed, additionalSharedSecretRefs: [] }))).toMatchObject({ spec: { additionalSharedSecretRefs: [] } });
  });

  it("WebhookDestination: a header trackhook sets itself (any case)", async () => {
    const stderr = await rejection(destination("reserved-header", { ...minimalDestination, headers: [{ name: "X-Signature", value: "forged" }] }));
    expect(stderr).toContain("spec.headers[0]: Invalid value");
    expect(stderr).toContain("this header is set by trackhook itself");
  });

  it("WebhookDestination: a header with both value and valueFrom, or neither", async () => {
    const message = "spec.headers[0]: Invalid value: exactly one of value or valueFrom must be set";
    const both = { name: "Authorization", value: "Bearer x", valueFrom: { secretKeyRef: { name: "tokens", key: "hooks" } } };
    expect(await rejection(destination("header-both", { ...minimalDestination, headers: [both] }))).toContain(message);
    expect(await rejection(destination("header-neither", { ...minimalDestination, headers: [{ name: "X-Team" }] }))).toContain(message);
  });

  it("Source: no writeKeySecretRef, or one without a key", async () => {
    expect(await rejection(source("no-ref", { enabled: true }))).toContain("spec.writeKeySecretRef: Required value");
    expect(await rejection(source("no-key", { writeKeySecretRef: { name: "keys" } }))).toContain("spec.writeKeySecretRef.key: Required value");
  });

  it("Source: a rateLimit under one message a second, without messagesPerSecond, or with a field it does not have", async () => {
    const ref = { writeKeySecretRef: { name: "keys", key: "web" } };
    expect(await rejection(source("rate-zero", { ...ref, rateLimit: { messagesPerSecond: 0 } }))).toContain("spec.rateLimit.messagesPerSecond: Invalid value: 0");
    expect(await rejection(source("rate-missing", { ...ref, rateLimit: { burst: 10 } }))).toContain("spec.rateLimit.messagesPerSecond: Required value");
    expect(await rejection(source("rate-unknown", { ...ref, rateLimit: { messagesPerSecond: 5, perMinute: 10 } }))).toContain('unknown field "spec.rateLimit.perMinute"');
  });

  it("Source: a name that is not a DNS label (names become NATS subject tokens: no dots)", async () => {
    // Kubernetes itself would accept a.b (a DNS subdomain); the CRD's metadata.name pattern does not.
    expect(await rejection(source("a.b"))).toContain(`metadata.name: Invalid value: "a.b": metadata.name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`);
    expect(await rejection(source("Bad.Name"))).toContain(`metadata.name: Invalid value: "Bad.Name"`);
  });

  it("DeletionRequest: no userIds, an empty list, or more than 5000", async () => {
    expect(await rejection(deletionRequest("no-users", {}))).toContain("spec.userIds: Required value");
    expect(await rejection(deletionRequest("empty-users", { userIds: [] }))).toContain(
      "spec.userIds: Invalid value: 0: spec.userIds in body should have at least 1 items",
    );
    const userIds = Array.from({ length: 5001 }, (_, i) => `user-${i}`);
    expect(await rejection(deletionRequest("too-many-users", { userIds }))).toContain("spec.userIds: Too many: 5001: must have at most 5000 items");
  });

  it("DeletionRequest: a user id with whitespace at either end, or a control character (regression: accepted, and a user who does not exist was notified)", async () => {
    for (const [i, id] of [" alice", "alice ", "a\nb", "tab\t"].entries()) {
      expect(await rejection(deletionRequest(`odd-user-${i}`, { userIds: ["ok", id] })), JSON.stringify(id)).toContain("spec.userIds[1]: Invalid value");
    }
    // Inner spaces and any script are ids like others.
    await create(deletionRequest("fine-users", { userIds: ["jane doe", "ünïcödé-用户", "x"] }));
  });

  it("DeletionRequest: the spec cannot be changed, but labels and status can", async () => {
    await create(deletionRequest("frozen", { userIds: ["u1"] }));
    const refused = await cluster.kubectl(["patch", "deletionrequest", "frozen", "-n", ns, "--type=merge", "-p", JSON.stringify({ spec: { userIds: ["u2"] } })]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain("spec: Invalid value: a DeletionRequest cannot be changed; create a new one");

    // The rule covers spec only: users may label the request and the operator must report progress.
    await cluster.kubectlOk(["label", "deletionrequest", "frozen", "-n", ns, "ticket=GDPR-1"]);
    await cluster.kubectlOk(["patch", "deletionrequest", "frozen", "-n", ns, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: { state: "RUNNING" } })]);
    expect(await cluster.kubectlOk(["get", "deletionrequest", "frozen", "-n", ns, "-o", "jsonpath={.status.state}"])).toBe("RUNNING");
  });

  it("DeletionRequest: the largest allowed spec is stored, and its immutability rule stays within the CEL cost budget", async () => {
    // 5000 ids of 256 characters: the worst case `self == oldSelf` has to compare (~1.3 MB).
    const userIds = Array.from({ length: 5000 }, (_, i) => String(i).padStart(256, "u"));
    await create(deletionRequest("largest", { userIds }));
    const refused = await cluster.kubectl(["patch", "deletionrequest", "largest", "-n", ns, "--type=merge", "-p", JSON.stringify({ spec: { sources: ["web"] } })]);
    expect(refused.stderr).toContain("a DeletionRequest cannot be changed; create a new one");
    expect(refused.stderr).not.toMatch(/cost|budget/i);
  });
});

describe("CRDs: defaults are filled in by the API server", () => {
  it("a minimal WebhookDestination reads back with every default", async () => {
    await create(destination("defaults", minimalDestination));
    const stored = JSON.parse(await cluster.kubectlOk(["get", "webhookdestination", "defaults", "-n", ns, "-o", "json"])) as { spec: Json };
    expect(stored.spec).toEqual({
      ...minimalDestination,
      enabled: true,
      timeout: "5s",
      retryWindow: "4h",
      maxInFlight: 100,
      standardWebhooks: false,
    });
  });

  it("a minimal Source reads back enabled", async () => {
    await create(source("defaults"));
    const stored = JSON.parse(await cluster.kubectlOk(["get", "source", "defaults", "-n", ns, "-o", "json"])) as { spec: Json };
    expect(stored.spec).toEqual({ writeKeySecretRef: { name: "keys", key: "web" }, enabled: true });
  });

  it("does not override a value the user set", async () => {
    const created = await create(destination("explicit", { ...minimalDestination, enabled: false, timeout: "30s", maxInFlight: 1 }));
    expect(created.spec).toMatchObject({ enabled: false, timeout: "30s", maxInFlight: 1, retryWindow: "4h" });
  });
});

describe("CRDs: kubectl explain documents every field", () => {
  interface SchemaNode {
    description?: string;
    properties?: Record<string, SchemaNode>;
    items?: SchemaNode;
  }

  interface ObjectField {
    plural: string;
    /** As `kubectl explain` takes it, e.g. spec.headers.valueFrom (an array's [] is implicit). */
    path: string;
    fields: Record<string, SchemaNode>;
  }

  /** Collects every object that has fields, and every field without a description. */
  function walk(node: SchemaNode, plural: string, path: string, objects: ObjectField[], undocumented: string[]): void {
    const object = node.items ?? node; // an array's fields are those of its items
    if (!object.properties) return;
    objects.push({ plural, path, fields: object.properties });
    for (const [name, child] of Object.entries(object.properties)) {
      if (!child.description?.trim()) undocumented.push(`${plural}.${path}.${name}`);
      walk(child, plural, `${path}.${name}`, objects, undocumented);
    }
  }

  it("every spec and status field has a description, and kubectl explain shows it", async () => {
    // The schemas as the cluster stores them: status is covered too, which test/schema does not check.
    const objects: ObjectField[] = [];
    const undocumented: string[] = [];
    for (const crd of await crds()) {
      const spec = crd.spec as { names: { plural: string }; versions: Array<{ schema: { openAPIV3Schema: SchemaNode } }> };
      const root = spec.versions[0]!.schema.openAPIV3Schema;
      for (const top of ["spec", "status"]) {
        const node = root.properties?.[top];
        if (!node?.description?.trim()) undocumented.push(`${spec.names.plural}.${top}`);
        if (node) walk(node, spec.names.plural, top, objects, undocumented);
      }
    }
    expect(undocumented).toEqual([]);

    // One `kubectl explain` per object (~16 calls, ~50 ms each) covers every field: each lists its
    // fields with their descriptions. kubectl prints "<empty>" / "<no description>" for a missing one.
    const flat = (text: string) => text.replace(/\s+/g, " ");
    const explained = await Promise.all(
      objects.map(async ({ plural, path }) => flat(await cluster.kubectlOk(["explain", `${plural}.${path}`, `--api-version=${API_VERSION}`]))),
    );
    const missing: string[] = [];
    objects.forEach(({ plural, path, fields }, i) => {
      const text = explained[i]!;
      if (text.includes("<empty>") || text.includes("<no description>")) missing.push(`${plural}.${path}: ${text}`);
      for (const [name, field] of Object.entries(fields)) {
        if (!text.includes(flat(field.description ?? "\0"))) missing.push(`${plural}.${path}.${name}`);
      }
    });
    expect(missing).toEqual([]);
    expect(objects.length).toBeGreaterThanOrEqual(12);
  });
});
