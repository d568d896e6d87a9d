// A WebhookDestination's Delivering condition: Ready says its spec is in effect, Delivering how
// delivery goes (found by a receiver-owner's view: a receiver down for an hour showed Ready=True
// and nothing else in kubectl). A 2 s window here; 5m by default.
import { describe, expect, it } from "vitest";
import { DLQ_STREAM, dlqSubject } from "../../dataplane/nats/mod.ts";
import { answer } from "../harness/receiver.ts";
import { basic, post } from "../harness/ingest.ts";
import { destinationYaml, secretYaml, sourceYaml, yamlDocuments } from "../harness/documents.ts";
import { useOperator, useOperatorEnv, type KubeResource } from "../harness/operator.ts";

const env = useOperatorEnv("health");
useOperator(env, { deliveryHealthWindowMs: 2_000 });

const delivering = (d: KubeResource | undefined) => d?.status?.conditions?.find((c) => c.type === "Delivering");
const waitDelivering = (name: string, reason: string | undefined, timeoutMs = 20_000) =>
  env.waitFor(`${name} Delivering ${reason ?? "absent"}`, async () => {
    const d = await env.get("WebhookDestination", name);
    return delivering(d)?.reason === reason ? d : undefined;
  }, timeoutMs);
const track = async (messageId: string) =>
  expect((await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "Checked", messageId }, { headers: { authorization: basic("health-key") } })).status).toBe(200);
/** A destination `name` whose receiver answers `status`, sent one message. */
async function destinationAnswering(name: string, status: number): Promise<void> {
  env.receiver.on(`/${name}`, answer(status));
  await env.apply(destinationYaml(name, { sources: ["web"], urls: [env.receiver.url(`/${name}`)] }));
  await env.waitReady("WebhookDestination", name);
  await track(`${name}-1`);
}
const eventReasons = async (name: string) => {
  const list = JSON.parse(await env.cluster.kubectlOk(["get", "events", "-n", env.namespace, "--field-selector", `involvedObject.name=${name}`, "-o", "json"])) as { items: Array<{ type: string; reason: string; message: string }> };
  return list.items.map((e) => `${e.type} ${e.reason}`);
};

describe("the Delivering condition", () => {
  it("is True while what is sent is delivered, and shows in kubectl get", async () => {
    await env.apply(yamlDocuments(secretYaml("k", { writeKey: "health-key" }), sourceYaml("web", { name: "k" }), destinationYaml("fine", { sources: ["web"], urls: [env.receiver.url("/fine")] })));
    await env.waitReady("Source", "web");
    await env.waitReady("WebhookDestination", "fine");
    await track("fine-1");
    await env.waitFor("fine-1 delivered", async () => env.receiver.requests("/fine").length > 0);
    const fine = await waitDelivering("fine", "Delivering");
    expect(delivering(fine)).toMatchObject({ status: "True", message: expect.stringContaining("none was dead-lettered") });
    // Written alongside Ready, not instead of it.
    expect(fine.status!.conditions!.find((c) => c.type === "Ready")).toMatchObject({ status: "True", reason: "Reconciled" });
    const table = await env.cluster.kubectlOk(["get", "webhookdestinations", "-n", env.namespace, "fine"]);
    expect(table.split("\n")[0]).toMatch(/DELIVERY/);
    expect(table.split("\n")[1]).toMatch(/\bDelivering\b/);
  });

  it("turns False with NoProgress while a receiver fails everything it is sent, said in a Warning event, and True again once it answers", async () => {
    await destinationAnswering("down", 503);
    const down = await waitDelivering("down", "NoProgress");
    expect(delivering(down)).toMatchObject({ status: "False", message: expect.stringContaining(`trackhook attempts --destination ${env.namespace}/down`) });
    // Ready is about the spec, which is fine.
    expect(down.status!.conditions!.find((c) => c.type === "Ready")).toMatchObject({ status: "True" });
    await env.waitFor("a NoProgress event", async () => (await eventReasons("down")).includes("Warning NoProgress"));

    env.receiver.on("/down", answer(200));
    await waitDelivering("down", "Delivering", 60_000);
    await env.waitFor("a Delivering event", async () => (await eventReasons("down")).includes("Normal Delivering"));
  });

  it("turns False with DeadLettering when messages are dead-lettered, and True once the window passes without more", async () => {
    await destinationAnswering("gone", 404);
    const gone = await waitDelivering("gone", "DeadLettering");
    expect(delivering(gone)).toMatchObject({ status: "False", message: expect.stringContaining(`trackhook dead-letters --destination ${env.namespace}/gone`) });
    await waitDelivering("gone", "Delivering");
  });

  it("stays DeadLettering for its hold when the dead letters are gone (the dead-letter stream lost, or purged), not Delivering at once (found by a disaster-recovery review)", async () => {
    await destinationAnswering("purged", 404);
    await waitDelivering("purged", "DeadLettering");
    await env.nats.jsm.streams.purge(DLQ_STREAM, { filter: dlqSubject(env.namespace, "purged") });
    await new Promise((r) => setTimeout(r, 1_500)); // seven of the health checks, within the 6 s hold
    expect(delivering(await env.get("WebhookDestination", "purged"))?.reason).toBe("DeadLettering");
    await waitDelivering("purged", "Delivering");
  });

  it("is taken out while the destination is disabled", async () => {
    await env.apply(destinationYaml("fine", { sources: ["web"], urls: [env.receiver.url("/fine")] }).replace("spec:\n", "spec:\n  enabled: false\n"));
    const off = await waitDelivering("fine", undefined);
    expect(off.status!.conditions!.find((c) => c.type === "Ready")).toMatchObject({ status: "True", message: expect.stringContaining("disabled") });
  });
});
