// A destination whose retry window is not shorter than the events stream's max_age could see
// messages expire while still being retried: delivery says so loudly when it starts it.
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigHolder, compileConfig } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender } from "../../dataplane/delivery/mod.ts";
import { ensureStream, eventsStreamConfig } from "../../dataplane/nats/mod.ts";
import { DEFAULT_STREAM } from "../harness/ingest.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";

let nats: NatsHarness;
beforeAll(async () => {
  nats = await startNats();
  await ensureStream(nats.jsm, eventsStreamConfig(DEFAULT_STREAM)); // max_age 1h
});
afterAll(async () => {
  await nats?.stop();
});

describe("retry window longer than the stream keeps messages", () => {
  it("is reported as an error when the destination starts", async () => {
    const lines: Array<{ msg: string; destination?: string }> = [];
    const log = pino({ level: "warn" }, new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) }));
    const config = new ConfigHolder(
      compileConfig(
        [
          { apiVersion: "v1", kind: "Secret", metadata: { name: "k" }, stringData: { writeKey: "w" } },
          { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name: "web" }, spec: { writeKeySecretRef: { name: "k", key: "writeKey" } } },
          { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "long" }, spec: { sources: ["web"], urls: ["https://hooks.example.com/in"], retryWindow: "2h" } },
          { apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name: "short" }, spec: { sources: ["web"], urls: ["https://hooks.example.com/in"], retryWindow: "30m" } },
        ].map((body, i) => ({ origin: `doc ${i + 1}`, body })),
      ),
    );
    const sender = new WebhookSender({ allowPrivateNetworks: false, userAgent: "test" });
    const service = await DeliveryService.start({ nc: await nats.connect(), config, sender, log, metrics: new DeliveryMetrics({ defaultMetrics: false }) });
    await service.stop();
    await sender.close();
    const warned = lines.filter((l) => l.msg.includes("retryWindow is not shorter than the events stream's max_age"));
    expect(warned.map((l) => l.destination)).toEqual(["default/long"]);
  });
});
