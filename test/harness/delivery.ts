// Test harness: nats-server, ingest and a delivery service sharing one live config, plus a webhook
// receiver, for a test file (beforeAll/afterAll). Tests add Sources and WebhookDestinations as
// they go; each is in force when the call returns.
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll } from "vitest";
import { ConfigHolder, compileConfig } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender } from "../../dataplane/delivery/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { DLQ_STREAM, dlqSubject, readStored, streamLastSeq } from "../../dataplane/nats/mod.ts";
import { startIngest, type IngestHarness } from "./ingest.ts";
import { startNats, type NatsHarness } from "./nats.ts";
import { startReceiver, type Receiver } from "./receiver.ts";

export interface DestinationSpec {
  sources: string[];
  urls: string[];
  secret?: string;
  /** Secrets that also sign webhook-signature (additionalSharedSecretRefs), in one Secret with `secret`. */
  additionalSecrets?: string[];
  headers?: Array<{ name: string; value: string }>;
  retryWindow?: string;
  timeout?: string;
  standardWebhooks?: boolean;
  maxInFlight?: number;
  enabled?: boolean;
  /** metadata.creationTimestamp, as Kubernetes sets it. */
  createdAt?: string;
}

export interface DeadLetterRead {
  reason?: string;
  lastStatus?: string;
  lastError?: string;
  body: Record<string, unknown>;
}

export interface DeliveryHarness {
  readonly nats: NatsHarness;
  readonly ingest: IngestHarness;
  readonly receiver: Receiver;
  readonly service: DeliveryService;
  readonly metrics: DeliveryMetrics;
  /** The live config all three share. */
  readonly config: ConfigHolder;
  /** A connection of the test's own (for admin functions). */
  readonly nc: NatsConnection;
  /** Adds a Source `<name>` with write key `key-<name>`; returns the key. */
  addSource(name: string): string;
  /** Takes a Source or WebhookDestination out of the config (its Secrets stay). */
  remove(kind: "Source" | "WebhookDestination", name: string): void;
  /** Adds (or replaces) a WebhookDestination `<name>`; resolves once it is delivering, or stopped if disabled. */
  setDestination(name: string, spec: DestinationSpec): Promise<void>;
  /** What the delivery service logged so far, as parsed JSON lines. */
  logs(): Array<Record<string, unknown>>;
  /** The dead letters of destination `default/<name>`, oldest first. */
  deadLetters(name: string): Promise<DeadLetterRead[]>;
}

export function useDelivery(options: { retireAfterMs?: number } = {}): DeliveryHarness {
  const config = new ConfigHolder();
  const documents = new Map<string, unknown>(); // kind/name -> document, in insertion order
  let nats: NatsHarness | undefined;
  let ingest: IngestHarness | undefined;
  let receiver: Receiver | undefined;
  let service: DeliveryService | undefined;
  let nc: NatsConnection | undefined;
  const metrics = new DeliveryMetrics({ defaultMetrics: false, retireAfterMs: options.retireAfterMs });
  const logLines: string[] = [];
  const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "trackhook/test" });

  beforeAll(async () => {
    nats = await startNats();
    ingest = await startIngest(nats, { config, retireAfterMs: options.retireAfterMs });
    receiver = await startReceiver();
    // The documents are compiled as `--config` files are.
    service = await DeliveryService.start({ nc: await nats.connect(), config, sender, log: createLogger({ level: "info", destination: { write: (line) => logLines.push(line) } }), metrics, configFromFiles: true });
    nc = await nats.connect();
  });
  afterAll(async () => {
    await service?.stop();
    await sender.close();
    await receiver?.close();
    await ingest?.close();
    await nats?.stop();
  });

  const apply = () =>
    config.set(compileConfig([...documents.values()].map((body, i) => ({ origin: `test document ${i + 1}`, body: structuredClone(body) }))));

  return {
    get nats() { return nats!; },
    get ingest() { return ingest!; },
    get receiver() { return receiver!; },
    get service() { return service!; },
    get nc() { return nc!; },
    metrics,
    config,
    addSource(name) {
      const key = `key-${name}`;
      documents.set(`Secret/${name}-key`, { apiVersion: "v1", kind: "Secret", metadata: { name: `${name}-key` }, stringData: { writeKey: key } });
      documents.set(`Source/${name}`, { apiVersion: "trackhook.io/v1alpha1", kind: "Source", metadata: { name }, spec: { writeKeySecretRef: { name: `${name}-key`, key: "writeKey" } } });
      apply();
      return key;
    },
    remove(kind, name) {
      documents.delete(`${kind}/${name}`);
      apply();
    },
    logs: () => logLines.map((line) => JSON.parse(line) as Record<string, unknown>),
    async deadLetters(name) {
      const out: DeadLetterRead[] = [];
      if ((await streamLastSeq(nats!.jsm, DLQ_STREAM)) === undefined) return out;
      // The destination's own messages only: the whole stream, one message at a time, took
      // seconds per look once a file's tests had filled it. A read that times out throws rather
      // than return fewer.
      for await (const m of readStored(nats!.js, DLQ_STREAM, dlqSubject("default", name), { whole: true })) {
        out.push({
          reason: m.headers?.get("Trackhook-Reason"), lastStatus: m.headers?.get("Trackhook-Last-Status") || undefined,
          lastError: m.headers?.get("Trackhook-Last-Error") || undefined, body: m.json<Record<string, unknown>>(),
        });
      }
      return out;
    },
    async setDestination(name, spec) {
      if (spec.secret) {
        const additional = Object.fromEntries((spec.additionalSecrets ?? []).map((value, i) => [`additional-${i}`, value]));
        documents.set(`Secret/${name}-shared`, { apiVersion: "v1", kind: "Secret", metadata: { name: `${name}-shared` }, stringData: { shared: spec.secret, ...additional } });
      }
      documents.set(`WebhookDestination/${name}`, {
        apiVersion: "trackhook.io/v1alpha1", kind: "WebhookDestination", metadata: { name, ...(spec.createdAt ? { creationTimestamp: spec.createdAt } : {}) },
        spec: {
          sources: spec.sources, urls: spec.urls,
          ...(spec.secret ? { sharedSecretRef: { name: `${name}-shared`, key: "shared" } } : {}),
          ...(spec.additionalSecrets ? { additionalSharedSecretRefs: spec.additionalSecrets.map((_, i) => ({ name: `${name}-shared`, key: `additional-${i}` })) } : {}),
          ...(spec.headers ? { headers: spec.headers } : {}),
          ...(spec.retryWindow ? { retryWindow: spec.retryWindow } : {}),
          ...(spec.timeout ? { timeout: spec.timeout } : {}),
          ...(spec.standardWebhooks ? { standardWebhooks: true } : {}),
          ...(spec.maxInFlight ? { maxInFlight: spec.maxInFlight } : {}),
          ...(spec.enabled === false ? { enabled: false } : {}),
        },
      });
      apply();
      // The service applies a config change in the background: until it has, a destination whose
      // spec changed still has its old worker, and `destinations` named it at once (a message sent
      // then went to the old URL: a CI flake). Applying the same config again waits for it.
      await service!.apply(config.current()).catch(() => {});
      const want = spec.enabled !== false;
      const deadline = Date.now() + 10_000;
      while (service!.destinations.includes(`default/${name}`) !== want) {
        if (Date.now() > deadline) throw new Error(`destination ${name} did not ${want ? "start" : "stop"}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}
