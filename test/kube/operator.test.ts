// The operator against a real kube-apiserver and nats-server, with the data plane configured
// the cluster way (ingest and delivery following the trackhook-config bucket): resources become
// Ready, events flow from an SDK-style request to a webhook, a rotated key takes over within
// seconds, and a deleted destination stops receiving. The tests build on one another (the Source
// `web` and its key from the first): run the file, not one test with -t.
import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { CONFIG_BUCKET, destinationKey, sha256Hex, sourceKey } from "../../dataplane/config/mod.ts";
import { consumerName, EVENTS_STREAM } from "../../dataplane/nats/mod.ts";
import { FINALIZER } from "../../operator/mod.ts";
import { basic, post } from "../harness/ingest.ts";
import { destinationYaml, secretYaml, sourceYaml } from "../harness/documents.ts";
import { useOperator, useOperatorEnv } from "../harness/operator.ts";
import { standardWebhooksVerifies as verifies } from "../harness/receiver.ts";

const env = useOperatorEnv("op");
const running = useOperator(env);

const secret = secretYaml;
const source = (name: string, secretName: string) => sourceYaml(name, { name: secretName });

const track = (key: string, body: Record<string, unknown>) =>
  post(`${env.ingest.url}/v1/track`, body, { headers: { authorization: basic(key) } });

async function kvValue(key: string): Promise<Record<string, unknown> | undefined> {
  const entry = await (await new Kvm(env.nats.nc).open(CONFIG_BUCKET)).get(key);
  return entry?.operation === "PUT" ? entry.json<Record<string, unknown>>() : undefined;
}

describe("operator: Source and WebhookDestination", () => {
  it("makes a Source Ready and its key accepted; a missing Secret gives Ready=False SecretNotFound", async () => {
    await env.apply([secret("web-key", { writeKey: "first-key" }), source("web", "web-key"), source("orphan", "no-such-secret")].join("---\n"));
    const web = await env.waitReady("Source", "web");
    expect(web.metadata.finalizers).toContain(FINALIZER);
    expect(web.status!.conditions!.find((c) => c.type === "Ready")).toMatchObject({ reason: "Reconciled" });
    // managedFields name the operator for what it writes (found by a GitOps review: client-node's default name).
    const managed = JSON.parse(await env.cluster.kubectlOk(["get", "source", "web", "-n", env.namespace, "--show-managed-fields", "-o", "json"])) as { metadata: { managedFields: Array<{ manager: string; subresource?: string; fieldsV1: object }> } };
    const byOperator = managed.metadata.managedFields.filter((f) => f.manager === "trackhook-operator");
    expect(byOperator.map((f) => f.subresource ?? "").sort()).toEqual(["", "status"]);
    expect(JSON.stringify(byOperator.find((f) => !f.subresource)!.fieldsV1)).toBe(JSON.stringify({ "f:metadata": { "f:finalizers": { ".": {}, [`v:"${FINALIZER}"`]: {} } } }));
    const orphan = await env.waitReady("Source", "orphan", "False");
    expect(orphan.status!.conditions![0]).toMatchObject({ reason: "SecretNotFound", message: expect.stringContaining(`Secret ${env.namespace}/no-such-secret does not exist`) });
    // Not only in status and Events: a metric to alert on (found by a review: nothing else said so).
    const resources = async () =>
      (await running.operator.metrics.registry.getSingleMetric("trackhook_operator_resources")!.get()).values.map((v) => `${v.labels.kind as string} ${v.labels.ready as string} ${v.labels.reason as string}`);
    await expect.poll(resources).toEqual(expect.arrayContaining(["Source True Reconciled", "Source False SecretNotFound"]));
    // Only the digest reaches NATS, and the key is nowhere in status or events.
    expect(await kvValue(sourceKey(env.namespace, "web"))).toMatchObject({ writeKeySha256: sha256Hex("first-key") });
    expect(JSON.stringify(web.status)).not.toContain("first-key");
    const events = await env.cluster.kubectlOk(["get", "events", "-n", env.namespace, "-o", "json"]);
    expect(events).not.toContain("first-key");
    await env.waitFor("the key accepted by ingest", async () => (await track("first-key", { userId: "u", event: "ping" })).status === 200);
    expect(running.operator.leading).toBe(true);
  });

  it("a disabled Source needs no Secret: Ready with its reason, and no key accepted (found by a review: SecretNotFound fired its alert for as long as it stayed off)", async () => {
    await env.apply(`apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: switched-off }
spec: { enabled: false, writeKeySecretRef: { name: deleted-secret, key: writeKey } }
`);
    const off = await env.waitReady("Source", "switched-off");
    expect(off.status!.conditions![0]).toMatchObject({ reason: "Reconciled", message: expect.stringContaining("disabled: the source accepts no messages") });
    expect(off.status!.conditions![0]!.message).toContain(`Secret ${env.namespace}/deleted-secret does not exist`);
    expect(await kvValue(sourceKey(env.namespace, "switched-off"))).toBeUndefined();
  });

  it("delivers an event through ingest and delivery configured from the bucket, signed", async () => {
    await env.apply([
      secret("hook-secret", { shared: "s3cret" }),
      destinationYaml("hook", { sources: ["web"], urls: [env.receiver.url("/hook")], sharedSecret: { name: "hook-secret", key: "shared" } }),
    ].join("---\n"));
    const hook = await env.waitReady("WebhookDestination", "hook");
    expect(hook.status).toMatchObject({ urlCount: 1, sources: ["web"] });
    expect(JSON.stringify(hook.status)).not.toContain("s3cret");
    await env.waitFor("the delivery worker", async () => env.delivery.destinations.includes(`${env.namespace}/hook`));

    expect((await track("first-key", { userId: "u-1", event: "Order Completed", messageId: "m-1" })).status).toBe(200);
    // The destination starts at its creationTimestamp, which has whole seconds: the previous
    // test's pings, sent within a second before it, may arrive too.
    const isM1 = (r: { body: Buffer }) => (JSON.parse(r.body.toString()) as { messageId?: string }).messageId === "m-1";
    const request = await env.waitFor("m-1 at the receiver", async () => env.receiver.requests("/hook").find(isM1));
    const body = JSON.parse(request!.body.toString()) as Record<string, unknown>;
    expect(body).toMatchObject({ type: "track", event: "Order Completed", userId: "u-1", messageId: "m-1", version: 1 });
    expect(request!.headers["x-signature"]).toBe(createHmac("sha1", "s3cret").update(request!.body).digest("hex"));
  });

  it("signs webhook-signature with additionalSharedSecretRefs too; one whose Secret is deleted leaves the last good config delivering, Ready=False naming it", async () => {
    const [next, old] = ["whsec_bmV4dC1zZWNyZXQtZm9yLXJvdGF0aW9u", "whsec_b2xkLXNlY3JldC1mb3Itcm90YXRpb24="];
    const rotating = (additional: boolean) =>
      `${destinationYaml("rotating", { sources: ["web"], urls: [env.receiver.url("/rotating")], sharedSecret: { name: "next-secret", key: "shared" } })}  standardWebhooks: true\n${additional ? "  additionalSharedSecretRefs: [{ name: old-secret, key: shared }]\n" : ""}`;
    await env.apply([secret("next-secret", { shared: next }), secret("old-secret", { shared: old }), rotating(true)].join("---\n"));
    const ready = await env.waitReady("WebhookDestination", "rotating");
    expect(JSON.stringify(ready.status)).not.toMatch(/whsec_/);
    expect(await kvValue(destinationKey(env.namespace, "rotating"))).toMatchObject({ sharedSecret: next, additionalSharedSecrets: [old] });
    await env.waitFor("the delivery worker", async () => env.delivery.destinations.includes(`${env.namespace}/rotating`));
    const delivered = async (messageId: string) => {
      expect((await track("first-key", { userId: "u-r", event: "Rotated", messageId })).status).toBe(200);
      return env.waitFor(`${messageId} at the receiver`, async () =>
        env.receiver.requests("/rotating").find((r) => (JSON.parse(r.body.toString()) as { messageId?: string }).messageId === messageId));
    };
    const both = await delivered("m-rot-1");
    expect([verifies(old, both!), verifies(next, both!)]).toEqual([true, true]);

    // The old secret's Secret deleted before its reference: said, and delivery goes on signing as before.
    await env.cluster.kubectlOk(["delete", "secret", "old-secret", "-n", env.namespace]);
    const failed = await env.waitReady("WebhookDestination", "rotating", "False");
    expect(failed.status!.conditions!.find((c) => c.type === "Ready")).toMatchObject({
      reason: "SecretNotFound",
      message: `spec.additionalSharedSecretRefs[0]: Secret ${env.namespace}/old-secret does not exist (the last good config is still delivering)`,
    });
    expect([verifies(old, (await delivered("m-rot-2"))!), verifies(next, (await delivered("m-rot-3"))!)]).toEqual([true, true]);

    // The reference removed too: Ready again, and only the new secret signs.
    await env.apply(rotating(false));
    await env.waitReady("WebhookDestination", "rotating");
    await env.waitFor("the old secret out of the config", async () => !("additionalSharedSecrets" in ((await kvValue(destinationKey(env.namespace, "rotating"))) ?? {})));
    await env.waitFor("the worker signing with the new secret alone", async () => {
      const r = await delivered(`m-rot-${Date.now()}`);
      return !verifies(old, r!) && verifies(next, r!);
    });
    await env.cluster.kubectlOk(["delete", "webhookdestination", "rotating", "-n", env.namespace, "--wait=true", "--timeout=15s"]);
  });

  it("a destination fixed by a second apply receives what was sent since its creation (regression: lost, its consumer started when made)", async () => {
    // A typo in the Secret's name, fixed by editing the destination (generation 2).
    await env.apply([secret("late-secret", { shared: "s3cret" }), destinationYaml("late", { sources: ["web"], urls: [env.receiver.url("/late")], sharedSecret: { name: "late-secert", key: "shared" } })].join("---\n"));
    await env.waitReady("WebhookDestination", "late", "False");
    expect((await track("first-key", { userId: "u-2", event: "Before The Fix", messageId: "m-late-1" })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1_100));
    await env.apply(destinationYaml("late", { sources: ["web"], urls: [env.receiver.url("/late")], sharedSecret: { name: "late-secret", key: "shared" } }));
    const late = await env.waitReady("WebhookDestination", "late");
    const { inEffectSince } = late.status as { inEffectSince?: string };
    expect(Date.parse(inEffectSince ?? "")).toBeGreaterThan(Date.parse((late.metadata as { creationTimestamp?: string }).creationTimestamp ?? ""));
    const isLate = (r: { body: Buffer }) => (JSON.parse(r.body.toString()) as { messageId?: string }).messageId === "m-late-1";
    await env.waitFor("m-late-1 at the receiver", async () => env.receiver.requests("/late").find(isLate));
    await env.cluster.kubectlOk(["delete", "webhookdestination", "late", "-n", env.namespace, "--wait=true", "--timeout=15s"]);
  });

  it("says since when a destination has been enabled without a break, in its status and its config; nothing while disabled, and from then once enabled again", async () => {
    const steady = (enabled: boolean) => `${destinationYaml("steady", { sources: ["web"], urls: [env.receiver.url("/steady")] })}${enabled ? "" : "  enabled: false\n"}`;
    type Status = { observedGeneration?: number; deliveringSince?: string | null };
    const observed = async (generation: number) => env.waitFor(`generation ${generation} observed`, async () => {
      const d = await env.get("WebhookDestination", "steady");
      const status = d?.status as Status | undefined;
      return d?.metadata.generation === generation && status?.observedGeneration === generation ? status : undefined;
    });
    await env.apply(steady(true));
    const { deliveringSince: since } = await observed(1);
    expect(Date.parse(since ?? "")).toBeGreaterThan(Date.now() - 60_000);
    await env.waitFor("it in the config", async () => (await kvValue(destinationKey(env.namespace, "steady")))?.deliveringSince === since);
    await env.apply(steady(false));
    expect((await observed(2)).deliveringSince).toBeUndefined();
    await env.waitFor("it out of the config", async () => (await kvValue(destinationKey(env.namespace, "steady")))?.enabled === false);
    expect((await kvValue(destinationKey(env.namespace, "steady")))?.deliveringSince).toBeUndefined();
    await env.apply(steady(true));
    expect(Date.parse((await observed(3)).deliveringSince ?? "")).toBeGreaterThan(Date.parse(since!));
    await env.cluster.kubectlOk(["delete", "webhookdestination", "steady", "-n", env.namespace, "--wait=true", "--timeout=15s"]);
  });

  it("rotating the write-key Secret makes the old key fail and the new one work within 10 s", async () => {
    const started = Date.now();
    await env.apply(secret("web-key", { writeKey: "second-key" }));
    await env.waitFor("the new key accepted", async () => (await track("second-key", { userId: "u", event: "e" })).status === 200, 10_000);
    expect((await track("first-key", { userId: "u", event: "e" })).status).toBe(401);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("an invalid destination keeps its last good config while Ready says what is wrong", async () => {
    await env.cluster.kubectlOk(["delete", "secret", "hook-secret", "-n", env.namespace]);
    const hook = await env.waitReady("WebhookDestination", "hook", "False");
    expect(hook.status!.conditions![0]).toMatchObject({ reason: "SecretNotFound", message: expect.stringContaining("the last good config is still delivering") });
    expect((await track("second-key", { userId: "u-2", event: "Still Flowing", messageId: "m-2" })).status).toBe(200);
    await env.waitFor("m-2 delivered with the last good config", async () =>
      env.receiver.requests("/hook").some((r) => (JSON.parse(r.body.toString()) as { messageId: string }).messageId === "m-2"));
    await env.apply(secret("hook-secret", { shared: "s3cret" }));
    await env.waitReady("WebhookDestination", "hook");
  });

  it("deleting the destination removes its consumer and config, and nothing is delivered for it afterwards", async () => {
    await env.cluster.kubectlOk(["delete", "webhookdestination", "hook", "-n", env.namespace, "--wait=true", "--timeout=15s"]);
    expect(await env.get("WebhookDestination", "hook")).toBeUndefined(); // the finalizer was removed
    expect(await kvValue(destinationKey(env.namespace, "hook"))).toBeUndefined();
    const consumer = await env.nats.jsm.consumers.info(EVENTS_STREAM, consumerName(env.namespace, "hook")).catch((err: Error) => err);
    expect(consumer).toBeInstanceOf(Error);
    await env.waitFor("the delivery worker to stop", async () => !env.delivery.destinations.includes(`${env.namespace}/hook`));
    const before = env.receiver.requests("/hook").length;
    expect((await track("second-key", { userId: "u-3", event: "After Delete" })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1000));
    expect(env.receiver.requests("/hook")).toHaveLength(before);
  });

  it("a Source's rateLimit reaches ingest through the bucket: 429 beyond it, and none once it is removed", async () => {
    const limited = (rateLimit: string) => `apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: limited }
spec: { writeKeySecretRef: { name: limited-key, key: writeKey }${rateLimit} }
`;
    await env.apply([secret("limited-key", { writeKey: "limited-key-1" }), limited(", rateLimit: { messagesPerSecond: 1, burst: 2 }")].join("---\n"));
    await env.waitReady("Source", "limited");
    await env.waitFor("the limit in the bucket", async () => JSON.stringify((await kvValue(sourceKey(env.namespace, "limited")))?.rateLimit) === JSON.stringify({ perSecond: 1, burst: 2 }));
    await env.waitFor("the key accepted by ingest", async () => (await track("limited-key-1", { userId: "u", event: "first" })).status === 200);
    // A hundred messages overdraw it: the source would wait ~100 s. The limit's removal must end
    // that within the waitFor below, not the debt running out.
    const batch = await post(`${env.ingest.url}/v1/batch`, { batch: Array.from({ length: 100 }, (_, i) => ({ type: "track", userId: "u", event: `b${i}` })) }, { headers: { authorization: basic("limited-key-1") } });
    expect(batch.status).toBe(200);
    const refused = await track("limited-key-1", { userId: "u", event: "over" });
    expect(refused.status).toBe(429);
    expect(refused.json.code).toBe("rate_limited");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    await env.apply(limited(""));
    await env.waitFor("the limit gone from ingest", async () => (await track("limited-key-1", { userId: "u", event: "free" })).status === 200);
    expect(await kvValue(sourceKey(env.namespace, "limited"))).not.toHaveProperty("rateLimit");
  });

  it("a config bucket deleted under it is made again and refilled, and ingest takes the keys throughout (found by a review: every reconcile failed until a restart, and an empty bucket would have had ingest answer 401)", async () => {
    await env.apply([secret("refill-key", { writeKey: "refill-key-1" }), source("refill", "refill-key")].join("---\n"));
    await env.waitReady("Source", "refill");
    await env.waitFor("the key accepted by ingest", async () => (await track("refill-key-1", { userId: "u", event: "ping" })).status === 200);
    await (await new Kvm(env.nats.nc).open(CONFIG_BUCKET)).destroy();
    const statuses: number[] = [];
    const until = Date.now() + 20_000;
    while (Date.now() < until) {
      statuses.push((await track("refill-key-1", { userId: "u", event: "during" })).status);
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(await kvValue(sourceKey(env.namespace, "refill")).catch(() => undefined)).toMatchObject({ writeKeySha256: sha256Hex("refill-key-1") });
    expect(statuses.filter((status) => status !== 200)).toEqual([]);
  }, 40_000);

  it("a config entry deleted or overwritten by hand is written again at once, and one with no resource is removed (found by a disaster-recovery review: 401 to a valid key until the resync, ten minutes later)", async () => {
    await env.apply([secret("drift-key", { writeKey: "drift-key-1" }), source("drift", "drift-key")].join("---\n"));
    await env.waitReady("Source", "drift");
    const kv = await new Kvm(env.nats.nc).open(CONFIG_BUCKET);
    const key = sourceKey(env.namespace, "drift");
    const digest = async () => (await kvValue(key))?.writeKeySha256;
    await kv.delete(key); // `nats kv del`
    await expect.poll(digest, { timeout: 10_000, interval: 200 }).toBe(sha256Hex("drift-key-1"));
    await env.waitFor("the key accepted again", async () => (await track("drift-key-1", { userId: "u", event: "e" })).status === 200);
    await kv.put(key, JSON.stringify({ ...(await kvValue(key)), writeKeySha256: sha256Hex("someone-else") })); // `nats kv put`
    await expect.poll(digest, { timeout: 10_000, interval: 200 }).toBe(sha256Hex("drift-key-1"));
    const stray = sourceKey(env.namespace, "no-such-source");
    await kv.put(stray, JSON.stringify({ namespace: env.namespace, name: "no-such-source", enabled: true, writeKeySha256: sha256Hex("stray") }));
    await expect.poll(() => kvValue(stray), { timeout: 10_000, interval: 200 }).toBeUndefined();
  });

  it("deleting a Source takes its key out of ingest", async () => {
    await env.cluster.kubectlOk(["delete", "source", "web", "-n", env.namespace, "--wait=true", "--timeout=15s"]);
    expect(await kvValue(sourceKey(env.namespace, "web"))).toBeUndefined();
    await env.waitFor("the key refused", async () => (await track("second-key", { userId: "u", event: "e" })).status === 401);
  });

  it("a destination listing a Source that was deleted keeps taking spec changes and says which source is gone (found by a GitOps review: SourceNotFound froze its last good config)", async () => {
    await env.apply([secret("gone-a-key", { writeKey: "gone-a" }), source("gone-a", "gone-a-key"), secret("kept-b-key", { writeKey: "kept-b" }), source("kept-b", "kept-b-key"),
      destinationYaml("both", { sources: ["gone-a", "kept-b"], urls: [env.receiver.url("/both-1")] })].join("---\n"));
    await env.waitReady("WebhookDestination", "both");
    await env.cluster.kubectlOk(["delete", "source", "gone-a", "-n", env.namespace, "--wait=true", "--timeout=15s"]);
    await env.apply(destinationYaml("both", { sources: ["gone-a", "kept-b"], urls: [env.receiver.url("/both-2")] }));
    const both = await env.waitFor("the new URL in effect", async () => {
      const d = await env.get("WebhookDestination", "both");
      return d?.status?.observedGeneration === d?.metadata.generation && d?.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ? d : undefined;
    });
    expect(both.status!.conditions!.find((c) => c.type === "Ready")).toMatchObject({ reason: "SourceNotAccepting", message: expect.stringContaining("Source gone-a accepts no messages (no such Source in the namespace)") });
    // Sent until one arrives at the new URL: the destination's name is listed by the old worker
    // too, so waiting for it would prove nothing.
    await env.waitFor("kept-b's message at the new URL", async () => {
      await track("kept-b", { userId: "u", event: "After", messageId: `both-${Date.now()}` });
      return env.receiver.requests("/both-2").length > 0;
    });
  });

  it("a copied write key never takes over: the older Source keeps it, the copy is refused until the key is free", async () => {
    await env.apply([secret("orig-key", { writeKey: "shared-key" }), source("original", "orig-key")].join("---\n"));
    await env.waitReady("Source", "original");
    await env.apply([secret("copy-key", { writeKey: "shared-key" }), source("copycat", "copy-key")].join("---\n"));
    const copycat = await env.waitReady("Source", "copycat", "False");
    expect(copycat.status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey", message: expect.stringContaining(`Source ${env.namespace}/original already uses the same write key`) });
    expect(await kvValue(sourceKey(env.namespace, "original"))).toBeDefined();
    expect(await kvValue(sourceKey(env.namespace, "copycat"))).toBeUndefined();

    // A destination listing the copy (a Source renamed in Git, the old one not yet pruned) says it gets nothing from it (found by a GitOps review).
    await env.apply(destinationYaml("renamed", { sources: ["copycat"], urls: [env.receiver.url("/renamed")] }));
    const waiting = await env.waitFor("the destination to name the source", async () => {
      const d = await env.get("WebhookDestination", "renamed");
      return d?.status?.conditions?.find((c) => c.type === "Ready" && c.reason === "SourceNotAccepting") ? d : undefined;
    });
    expect(waiting.status!.conditions!.find((c) => c.type === "Ready")).toMatchObject({ status: "True", message: expect.stringContaining("Source copycat accepts no messages (DuplicateWriteKey)") });

    await env.cluster.kubectlOk(["delete", "source", "original", "-n", env.namespace, "--wait=true", "--timeout=15s"]);
    await env.waitReady("Source", "copycat");
    expect(await kvValue(sourceKey(env.namespace, "copycat"))).toBeDefined();
    // ...and says so no more once the source takes messages.
    await env.waitFor("the destination Reconciled", async () => (await env.get("WebhookDestination", "renamed"))?.status?.conditions?.some((c) => c.type === "Ready" && c.reason === "Reconciled"));
  });
});
