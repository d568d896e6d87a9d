// Which Source holds a write key must survive an operator restart: a newer Source that copied
// another's key while no operator ran must not take that key's traffic, even for a moment.
import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { CONFIG_BUCKET, sourceKey } from "../../dataplane/config/mod.ts";
import { secretYaml, sourceYaml } from "../harness/documents.ts";
import { basic, post } from "../harness/ingest.ts";
import { startOperator, useOperatorEnv } from "../harness/operator.ts";

const env = useOperatorEnv("keys");

describe("a copied write key after an operator restart", () => {
  it("is refused without its Source ever entering the config (regression: the first Source reconciled took the key)", async () => {
    const first = await startOperator(env);
    try {
      await env.apply([secretYaml("victim-key", { writeKey: "victim-secret-key" }), sourceYaml("zz-victim", { name: "victim-key" })].join("---\n"));
      await env.waitReady("Source", "zz-victim");
    } finally {
      await first.stop();
    }
    // While no operator runs: newer Sources with the same key, whose names sort first. With two
    // reconciles at a time, the first two copies are reconciled before the victim.
    const copies = ["aa-copy-1", "aa-copy-2", "aa-copy-3"];
    await env.apply([secretYaml("copy-key", { writeKey: "victim-secret-key" }), ...copies.map((name) => sourceYaml(name, { name: "copy-key" }))].join("---\n"));
    const kv = await new Kvm(env.nats.nc).open(CONFIG_BUCKET);
    const puts: string[] = [];
    const watch = await kv.watch({ key: sourceKey(env.namespace, "*") });
    void (async () => {
      for await (const entry of watch) if (entry.operation === "PUT") puts.push(entry.key);
    })();

    const second = await startOperator(env);
    try {
      for (const name of copies) {
        const copy = await env.waitReady("Source", name, "False");
        expect(copy.status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey" });
      }
      await env.waitReady("Source", "zz-victim");
      expect(puts.filter((key) => key !== sourceKey(env.namespace, "zz-victim"))).toEqual([]);
      expect((await kv.get(sourceKey(env.namespace, "zz-victim")))?.operation).toBe("PUT");
    } finally {
      watch.stop();
      await second.stop();
    }
  });
});

describe("an older Source edited to another's write key", () => {
  it("is refused; the Source in effect keeps the key and its traffic (regression: the older by creationTimestamp took it)", async () => {
    const operator = await startOperator(env);
    try {
      await env.apply([secretYaml("old-key", { writeKey: "old-own-key" }), sourceYaml("old-tenant", { name: "old-key" })].join("---\n"));
      await env.waitReady("Source", "old-tenant");
      // Created a second later, so that old-tenant is the older by its creationTimestamp.
      await new Promise((r) => setTimeout(r, 1100));
      await env.apply([secretYaml("new-key", { writeKey: "public-snippet-key" }), sourceYaml("new-tenant", { name: "new-key" })].join("---\n"));
      await env.waitReady("Source", "new-tenant");
      const kv = await new Kvm(env.nats.nc).open(CONFIG_BUCKET);
      const newEntry = await kv.get(sourceKey(env.namespace, "new-tenant"));

      await env.apply(secretYaml("old-key", { writeKey: "public-snippet-key" }));
      const refused = await env.waitReady("Source", "old-tenant", "False");
      expect(refused.status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey", message: expect.stringContaining(`Source ${env.namespace}/new-tenant already uses the same write key`) });
      expect((await kv.get(sourceKey(env.namespace, "old-tenant")))?.operation).not.toBe("PUT");
      const kept = await env.waitReady("Source", "new-tenant");
      expect(kept.status!.conditions![0]).toMatchObject({ status: "True" });
      expect((await kv.get(sourceKey(env.namespace, "new-tenant")))?.revision).toBe(newEntry?.revision);
    } finally {
      await operator.stop();
    }
  });
});

describe("a Source whose Secret goes missing", () => {
  it("keeps its key reserved: a copy waiting with DuplicateWriteKey does not take it, nor its traffic (regression: the copy took it)", async () => {
    let operator = await startOperator(env);
    const trackWith = (key: string) => post(`${env.ingest.url}/v1/track`, { userId: "u-1", event: "Checked" }, { headers: { authorization: basic(key) } });
    try {
      await env.apply([secretYaml("holder-key", { writeKey: "browser-snippet-key" }), sourceYaml("holder", { name: "holder-key" })].join("---\n"));
      await env.waitReady("Source", "holder");
      await env.apply([secretYaml("thief-key", { writeKey: "browser-snippet-key" }), sourceYaml("thief", { name: "thief-key" })].join("---\n"));
      expect((await env.waitReady("Source", "thief", "False")).status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey" });

      // The holder's Secret deleted (a GitOps tool recreating it, say): its key stops working...
      await env.cluster.kubectlOk(["delete", "secret", "holder-key", "-n", env.namespace]);
      const broken = await env.waitReady("Source", "holder", "False");
      expect(broken.status!.conditions![0]).toMatchObject({ reason: "SecretNotFound", message: expect.stringContaining("its write key stays reserved for it") });
      await env.waitFor("the key refused by ingest", async () => (await trackWith("browser-snippet-key")).status === 401);
      // ...and stays the holder's, across an operator restart too (the new one reconciles the
      // copy afresh, knowing the holder only from the config bucket): never in effect.
      await operator.stop();
      const kv = await new Kvm(env.nats.nc).open(CONFIG_BUCKET);
      const puts: string[] = [];
      const watch = await kv.watch({ key: sourceKey(env.namespace, "thief") });
      void (async () => {
        for await (const entry of watch) if (entry.operation === "PUT") puts.push(entry.key);
      })();
      operator = await startOperator(env); // synced: its first reconciles are done or under way
      await new Promise((r) => setTimeout(r, 2_000));
      watch.stop();
      expect((await env.get("Source", "thief"))!.status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey" });
      expect(puts).toEqual([]);
      expect((await kv.get(sourceKey(env.namespace, "thief")))?.operation).not.toBe("PUT");
      expect((await trackWith("browser-snippet-key")).status).toBe(401);

      // Back, the holder has its key again.
      await env.apply(secretYaml("holder-key", { writeKey: "browser-snippet-key" }));
      await env.waitReady("Source", "holder");
      await env.waitFor("the key accepted again", async () => (await trackWith("browser-snippet-key")).status === 200);
      expect((await env.waitReady("Source", "thief", "False")).status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey" });
    } finally {
      await operator.stop();
    }
  }, 45_000);
});

describe("a write key rotated with spec.additionalWriteKeySecretRefs", () => {
  const rotatedSource = (additional: string) => `apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: rotated }
spec:
  writeKeySecretRef: { name: rotated-new, key: writeKey }
  additionalWriteKeySecretRefs: ${additional}
`;
  const trackWith = (key: string) => post(`${env.ingest.url}/v1/track`, { userId: "u-1", event: "Rotated" }, { headers: { authorization: basic(key) } });

  it("accepts both keys; an old key whose Secret is deleted stops working but stays reserved, across an operator restart (regression: a copy waiting with DuplicateWriteKey took it, and the old apps' traffic)", async () => {
    let operator = await startOperator(env);
    try {
      await env.apply([
        secretYaml("rotated-new", { writeKey: "rotated-key-2" }),
        secretYaml("rotated-old", { writeKey: "rotated-key-1" }),
        rotatedSource("[{ name: rotated-old, key: writeKey }]"),
      ].join("---\n"));
      const ready = await env.waitReady("Source", "rotated");
      expect(ready.status!.conditions![0]).toMatchObject({ reason: "Reconciled", message: "its 2 write keys are accepted by ingest" });
      await env.waitFor("both keys accepted", async () => (await trackWith("rotated-key-1")).status === 200 && (await trackWith("rotated-key-2")).status === 200);
      // Another tenant copies the old key (a browser key is public): refused.
      await env.apply([secretYaml("copy-of-old", { writeKey: "rotated-key-1" }), sourceYaml("copier", { name: "copy-of-old" })].join("---\n"));
      expect((await env.waitReady("Source", "copier", "False")).status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey" });

      // The old key's Secret deleted before its reference: that key stops, the new one works...
      await env.cluster.kubectlOk(["delete", "secret", "rotated-old", "-n", env.namespace]);
      await env.waitFor("the old key skipped", async () => readyReason(await env.get("Source", "rotated")) === "AdditionalWriteKeySkipped");
      expect((await env.get("Source", "rotated"))!.status!.conditions![0]).toMatchObject({
        status: "True",
        message: expect.stringContaining(`spec.additionalWriteKeySecretRefs[0] is not accepted: Secret ${env.namespace}/rotated-old does not exist; that key stays reserved for this source`),
      });
      await env.waitFor("the old key refused", async () => (await trackWith("rotated-key-1")).status === 401);
      expect((await trackWith("rotated-key-2")).status).toBe(200);
      // ...and the copy does not get it, now or after an operator restart.
      await operator.stop();
      operator = await startOperator(env);
      await new Promise((r) => setTimeout(r, 2_000));
      expect((await env.get("Source", "copier"))!.status!.conditions![0]).toMatchObject({ reason: "DuplicateWriteKey" });
      expect((await trackWith("rotated-key-1")).status).toBe(401);

      // The Secret back: the old key is the rotated source's again.
      await env.apply(secretYaml("rotated-old", { writeKey: "rotated-key-1" }));
      await env.waitFor("the old key accepted again", async () => (await trackWith("rotated-key-1")).status === 200);
      expect(readyReason(await env.get("Source", "rotated"))).toBe("Reconciled");
    } finally {
      await operator.stop();
    }
  }, 60_000);

  it("an additional key another Source holds is left out; the source keeps its main key (regression: the whole source was refused)", async () => {
    const operator = await startOperator(env);
    try {
      await env.apply([secretYaml("other-key", { writeKey: "other-tenant-key" }), sourceYaml("other-tenant", { name: "other-key" })].join("---\n"));
      await env.waitReady("Source", "other-tenant");
      await env.apply([secretYaml("rotated-new", { writeKey: "rotated-key-2" }), rotatedSource("[{ name: other-key, key: writeKey }]")].join("---\n"));
      await env.waitFor("the copied key left out", async () => readyReason(await env.get("Source", "rotated")) === "AdditionalWriteKeySkipped");
      expect((await env.get("Source", "rotated"))!.status!.conditions![0]).toMatchObject({
        status: "True",
        message: expect.stringContaining(`additional write key other-key/writeKey is not accepted: Source ${env.namespace}/other-tenant already uses it`),
      });
      await env.waitFor("the main key accepted", async () => (await trackWith("rotated-key-2")).status === 200);
      const stored = async () => (await post(`${env.ingest.url}/v1/track`, { userId: "u-2", event: "Other", messageId: `other-${Date.now()}` }, { headers: { authorization: basic("other-tenant-key") } })).status;
      expect(await stored()).toBe(200);
      expect((await env.get("Source", "other-tenant"))!.status!.conditions![0]).toMatchObject({ status: "True", reason: "Reconciled" });
    } finally {
      await operator.stop();
    }
  }, 45_000);
});

function readyReason(resource: { status?: { conditions?: Array<{ reason?: string }> } } | undefined): string | undefined {
  return resource?.status?.conditions?.[0]?.reason;
}
