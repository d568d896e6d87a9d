// A NATS store lost while delivery was down (or a move to another NATS): what ingest stored on the
// new events stream before delivery came up reaches the destination (found by a disaster-recovery
// review: the consumer made at delivery's start began from then, and skipped it silently).
import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { CONFIG_BUCKET, destinationKey } from "../../dataplane/config/mod.ts";
import { EVENTS_STREAM, consumerName } from "../../dataplane/nats/mod.ts";
import { basic, post } from "../harness/ingest.ts";
import { destinationYaml, secretYaml, sourceYaml } from "../harness/documents.ts";
import { useOperator, useOperatorEnv } from "../harness/operator.ts";

const env = useOperatorEnv("lost");
useOperator(env);

const track = (messageId: string) =>
  post(`${env.ingest.url}/v1/track`, { userId: "u", event: "Stored", messageId }, { headers: { authorization: basic("lost-key") } });
const delivered = (messageId: string) =>
  env.receiver.requests("/hook").some((r) => (JSON.parse(r.body.toString()) as { messageId?: string }).messageId === messageId);

describe("a store lost while delivery was down", () => {
  it("what ingest stored on the new stream before delivery came up is delivered", async () => {
    await env.apply([secretYaml("k", { writeKey: "lost-key" }), sourceYaml("web", { name: "k" }), destinationYaml("hook", { sources: ["web"], urls: [env.receiver.url("/hook")] })].join("---\n"));
    await env.waitReady("Source", "web");
    const hook = await env.waitReady("WebhookDestination", "hook");
    expect(hook.status!.deliveringSince).toEqual(expect.any(String));
    expect((await track("before-loss")).status).toBe(200);
    await env.waitFor("before-loss delivered", async () => delivered("before-loss"));

    await env.restartDelivery(async () => {
      // The store is gone: ingest makes the stream again at its start and takes messages at once.
      const { config } = await env.nats.jsm.streams.info(EVENTS_STREAM);
      await env.nats.jsm.streams.delete(EVENTS_STREAM);
      await env.nats.jsm.streams.add(config);
      for (const id of ["stored-1", "stored-2"]) expect((await track(id)).status).toBe(200);
    });

    await env.waitFor("what was stored meanwhile delivered", async () => delivered("stored-1") && delivered("stored-2"));
    const consumer = await env.nats.jsm.consumers.info(EVENTS_STREAM, consumerName(env.namespace, "hook"));
    expect(consumer.config.deliver_policy).toBe("all");
    // Messages after the restart arrive too.
    expect((await track("after")).status).toBe(200);
    await env.waitFor("after delivered", async () => delivered("after"));
    const ids = env.receiver.requests("/hook").map((r) => (JSON.parse(r.body.toString()) as { messageId: string }).messageId);
    expect(ids.filter((id) => id.startsWith("stored-")).sort()).toEqual(["stored-1", "stored-2"]);
  });

  it("a destination applied while the stream is missing keeps one deliveringSince, in status and config, through the retries (found by a review: its config was written anew every 5 s)", async () => {
    const { config } = await env.nats.jsm.streams.info(EVENTS_STREAM);
    await env.nats.jsm.streams.delete(EVENTS_STREAM);
    try {
      await env.apply(destinationYaml("waiting", { sources: ["web"], urls: [env.receiver.url("/waiting")] }));
      const waiting = await env.waitReady("WebhookDestination", "waiting", "False");
      expect(waiting.status!.conditions![0]).toMatchObject({ reason: "StreamNotFound" });
      const kv = await new Kvm(env.nats.nc).open(CONFIG_BUCKET);
      const first = await kv.get(destinationKey(env.namespace, "waiting"));
      expect(first?.json<{ deliveringSince?: string }>().deliveringSince).toBe(waiting.status!.deliveringSince);
      await new Promise((r) => setTimeout(r, 6_000)); // past a retry
      expect((await kv.get(destinationKey(env.namespace, "waiting")))?.revision).toBe(first!.revision);
    } finally {
      await env.nats.jsm.streams.add(config);
    }
    await env.waitReady("WebhookDestination", "waiting");
  });
});
