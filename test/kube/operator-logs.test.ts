// What the operator logs, at its most talkative level, while it reconciles resources that hold
// secrets: never a write key, a shared secret or a header value taken from a Secret (found by a
// mutation audit: a debug line with a compiled destination in it would have passed every test).
import { describe, expect, it } from "vitest";
import { secretYaml, sourceYaml, yamlDocuments } from "../harness/documents.ts";
import { basic, post } from "../harness/ingest.ts";
import { spawnOperator, useOperatorEnv } from "../harness/operator.ts";

const env = useOperatorEnv("logs");

describe("operator logs", () => {
  it("hold no write key, shared secret or header value from a Secret, at debug level, through create, change and delete", async () => {
    const secrets = ["wk-3f9a1c-never-logged", "shared-77b2e0-never-logged", "Bearer tok-51d8aa-never-logged", "wk-rotated-c41e09-never-logged"];
    const operator = await spawnOperator(env, { logLevel: "debug" });
    try {
      const destination = (secretName: string) => `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: hook }
spec:
  sources: ["web"]
  urls: [${JSON.stringify(env.receiver.url("/logs"))}]
  sharedSecretRef: { name: ${secretName}, key: shared }
  headers:
    - { name: Authorization, valueFrom: { secretKeyRef: { name: ${secretName}, key: token } } }
`;
      await env.apply(yamlDocuments(
        secretYaml("web-key", { writeKey: secrets[0]! }),
        secretYaml("hook-secret", { shared: secrets[1]!, token: secrets[2]! }),
        sourceYaml("web", { name: "web-key" }),
        destination("hook-secret"),
      ));
      await env.waitReady("Source", "web");
      await env.waitReady("WebhookDestination", "hook");
      await env.apply(secretYaml("web-key", { writeKey: secrets[3]! })); // a rotation
      await env.waitFor("the rotated key accepted", async () => (await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "e" }, { headers: { authorization: basic(secrets[3]!) } })).status === 200);
      await env.cluster.kubectlOk(["delete", "webhookdestination", "hook", "-n", env.namespace, "--wait=true"]);
      await env.cluster.kubectlOk(["delete", "source", "web", "-n", env.namespace, "--wait=true"]);
      const output = operator.output();
      expect(output.split("\n").filter((l) => l.startsWith("{")).length).toBeGreaterThan(3); // it did log
      for (const secret of secrets.map((s) => s.replace("Bearer ", ""))) {
        expect(output).not.toContain(secret);
        expect(output).not.toContain(Buffer.from(secret).toString("base64").slice(0, 16)); // a Secret's data, as stored
      }
    } finally {
      await operator.stop();
    }
  }, 120_000);
});
