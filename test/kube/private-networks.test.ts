// `trackhook operator` without --allow-private-networks (the chart's default): a WebhookDestination
// whose URL can only reach a private address is refused with a reason, and its config never
// reaches delivery; a public URL is accepted. The rule itself is unit-tested in
// test/config/compile.test.ts; this checks the flag's wiring from the command line to the status.
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CONFIG_BUCKET, destinationKey } from "../../dataplane/config/mod.ts";
import { destinationYaml, secretYaml, sourceYaml, yamlDocuments } from "../harness/documents.ts";
import { spawnOperator, useOperatorEnv, type OperatorProcess } from "../harness/operator.ts";

const env = useOperatorEnv("privnet");
let operator: OperatorProcess | undefined;

beforeAll(async () => {
  operator = await spawnOperator(env, { allowPrivateNetworks: false });
}, 30_000);
afterAll(async () => {
  await operator?.stop();
});

const storedDestination = async (name: string) => {
  const entry = await (await new Kvm(env.nats.nc).open(CONFIG_BUCKET)).get(destinationKey(env.namespace, name));
  return entry && entry.operation === "PUT" ? (entry.json() as { urls: string[] }) : undefined;
};

describe("operator without --allow-private-networks", () => {
  it("refuses a destination on a loopback URL (Ready=False PrivateAddressRefused, no config for delivery) and accepts it once its URL is public", async () => {
    await env.apply(yamlDocuments(
      secretYaml("web-key", { writeKey: "key-privnet" }),
      sourceYaml("web", { name: "web-key" }),
      destinationYaml("internal", { sources: ["web"], urls: [env.receiver.url("/internal")] }),
    ));
    const refused = await env.waitReady("WebhookDestination", "internal", "False");
    const ready = refused.status!.conditions!.find((c) => c.type === "Ready")!;
    expect(ready.reason).toBe("PrivateAddressRefused");
    expect(ready.message).toContain("spec.urls[0]");
    expect(ready.message).toContain("--allow-private-networks");
    expect(await storedDestination("internal")).toBeUndefined();

    await env.apply(destinationYaml("internal", { sources: ["web"], urls: ["https://hooks.example.com/trackhook"] }));
    await env.waitReady("WebhookDestination", "internal");
    const stored = await env.waitFor("the destination's config in the bucket", () => storedDestination("internal"));
    expect(stored.urls).toEqual(["https://hooks.example.com/trackhook"]);
  }, 45_000);
});
