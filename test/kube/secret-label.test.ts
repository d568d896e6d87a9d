// `trackhook operator --require-secret-label`: only Secrets labelled trackhook.io/secret=true are
// read, so that whoever may create a WebhookDestination cannot send any Secret of the namespace to
// a URL of their choosing (found by a security review). Without the label, Ready says how to fix it.
import { Kvm } from "@nats-io/kv";
import { describe, expect, it } from "vitest";
import { CONFIG_BUCKET, destinationKey } from "../../dataplane/config/mod.ts";
import { destinationYaml, secretYaml, sourceYaml, yamlDocuments } from "../harness/documents.ts";
import { startOperator, useOperatorEnv } from "../harness/operator.ts";

const env = useOperatorEnv("seclabel");

describe("operator with --require-secret-label", () => {
  it("refuses an unlabelled Secret with SecretNotLabelled, sends nothing of it, and reads it once labelled", async () => {
    // Which Secrets the operator fetched (values and all).
    const fetched: string[] = [];
    const operator = await startOperator(env, { requireSecretLabel: true }, (kube) => {
      const read = kube.core.readNamespacedSecret.bind(kube.core);
      kube.core.readNamespacedSecret = (async (param: { name: string; namespace: string }) => {
        fetched.push(param.name);
        return read(param);
      }) as typeof kube.core.readNamespacedSecret;
    });
    try {
      await env.apply(yamlDocuments(
        secretYaml("web-key", { writeKey: "key-seclabel" }),
        sourceYaml("web", { name: "web-key" }),
        secretYaml("database", { password: "pg-secret-password" }),
        destinationYaml("loot", { sources: ["web"], urls: [env.receiver.url("/loot")], sharedSecret: { name: "database", key: "password" } }),
      ));
      const source = await env.waitReady("Source", "web", "False");
      expect(source.status!.conditions![0]).toMatchObject({
        reason: "SecretNotLabelled",
        message: expect.stringContaining(`kubectl label secret -n ${env.namespace} web-key trackhook.io/secret=true`),
      });
      const destination = await env.waitReady("WebhookDestination", "loot", "False");
      expect(destination.status!.conditions![0]).toMatchObject({ reason: "SecretNotLabelled" });

      await env.cluster.kubectlOk(["label", "secret", "-n", env.namespace, "web-key", "trackhook.io/secret=true"]);
      await env.waitReady("Source", "web");
      // The database Secret stays unread: the destination never takes effect.
      expect((await env.waitReady("WebhookDestination", "loot", "False")).status!.conditions![0]).toMatchObject({ reason: "SecretNotLabelled" });
      const entry = await (await new Kvm(env.nats.nc).open(CONFIG_BUCKET)).get(destinationKey(env.namespace, "loot"));
      expect(entry?.operation).not.toBe("PUT");
      // Not even fetched: refused from the cached labels (found by a supply-chain review: its
      // values were read, then refused).
      expect(fetched).toContain("web-key");
      expect(fetched).not.toContain("database");
    } finally {
      await operator.stop();
    }
  }, 45_000);
});
