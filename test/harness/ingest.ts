// Test harness: the ingest app, connected to a harness nats-server, configured from YAML text,
// listening on a free port. Helpers read back what landed in TRACKHOOK_EVENTS.
import { request } from "node:http";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll } from "vitest";
import { parseAllDocuments } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import { compileConfig, staticConfig, type ConfigProvider } from "../../dataplane/config/mod.ts";
import { buildIngestApp, IngestMetrics, type IngestOptionsInput } from "../../dataplane/ingest/mod.ts";
import { EVENTS_STREAM, ensureStream, eventsStreamConfig, readStored, type EventsStreamSettings } from "../../dataplane/nats/mod.ts";
import type { StoredMessage } from "../../schema/mod.ts";
import { startNats, type NatsHarness } from "./nats.ts";

export const WRITE_KEY = "test-write-key-1";
export const OTHER_WRITE_KEY = "test-write-key-2";

/** Two sources in namespace `default`: `web` (WRITE_KEY) and `app` (OTHER_WRITE_KEY), one disabled source. */
export const TEST_CONFIG = `
apiVersion: v1
kind: Secret
metadata: { name: keys }
stringData: { web: ${WRITE_KEY}, app: ${OTHER_WRITE_KEY}, off: disabled-key }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: web }
spec: { writeKeySecretRef: { name: keys, key: web } }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: app }
spec: { writeKeySecretRef: { name: keys, key: app } }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: off }
spec: { writeKeySecretRef: { name: keys, key: off }, enabled: false }
`;

export const DEFAULT_STREAM: EventsStreamSettings = {
  maxAgeMs: 3_600_000,
  maxBytes: 256 * 1024 * 1024,
  duplicateWindowMs: 120_000,
  replicas: 1,
};

export function configFromYaml(yaml: string): ConfigProvider {
  const documents = parseAllDocuments(yaml).map((doc, i) => ({ origin: `test config, document ${i + 1}`, body: doc.toJS() }));
  return staticConfig(compileConfig(documents.filter((d) => d.body)));
}

export interface IngestHarness {
  app: FastifyInstance;
  url: string;
  nc: NatsConnection;
  metrics: IngestMetrics;
  close(): Promise<void>;
}

export async function startIngest(
  nats: NatsHarness,
  options: { config?: ConfigProvider; ingest?: IngestOptionsInput; stream?: EventsStreamSettings; retireAfterMs?: number } = {},
): Promise<IngestHarness> {
  await ensureStream(nats.jsm, eventsStreamConfig(options.stream ?? DEFAULT_STREAM));
  const nc = await nats.connect();
  const metrics = new IngestMetrics({ defaultMetrics: false, retireAfterMs: options.retireAfterMs });
  const app = await buildIngestApp({ nc, config: options.config ?? configFromYaml(TEST_CONFIG), metrics }, options.ingest);
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  return { app, url, nc, metrics, close: () => app.close() };
}

/**
 * Every message in TRACKHOOK_EVENTS, in order, with its subject and Nats-Msg-Id. A read that
 * times out throws rather than return fewer: a test asserting that something is absent must not
 * pass on a busy server.
 */
export async function storedMessages(nats: NatsHarness): Promise<Array<{ subject: string; msgId: string | undefined; body: StoredMessage }>> {
  const out = [];
  for await (const msg of readStored(nats.js, EVENTS_STREAM, ">", { whole: true })) {
    out.push({ subject: msg.subject, msgId: msg.headers?.get("Nats-Msg-Id"), body: msg.json<StoredMessage>() });
  }
  return out;
}

export function basic(key: string, colon = true): string {
  return `Basic ${Buffer.from(colon ? `${key}:` : key).toString("base64")}`;
}

/** POSTs JSON (or raw bytes) with fetch and returns status, headers and parsed body. */
export async function post(
  url: string,
  body: unknown,
  init: { headers?: Record<string, string>; raw?: Uint8Array | string } = {},
): Promise<{ status: number; headers: Headers; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...init.headers },
    body: init.raw ?? JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : {} };
}

/** The value of trackhook_ingest_messages_total for a reason (summed over sources and outcomes). */
export async function messagesCounted(harness: IngestHarness, labels: { reason?: string; outcome?: string; source?: string }): Promise<number> {
  const metric = await harness.metrics.messages.get();
  return metric.values
    .filter((v) => Object.entries(labels).every(([k, want]) => v.labels[k as keyof typeof v.labels] === want))
    .reduce((sum, v) => sum + v.value, 0);
}

let counter = 0;
/** A messageId unique within the test run. */
export function uniqueId(prefix = "m"): string {
  return `${prefix}-${process.pid}-${Date.now()}-${counter++}`;
}

/**
 * The usual setup of an ingest test file: a nats-server and an ingest started before its tests
 * and stopped after them. Read `env.nats` and `env.ingest` inside tests and hooks.
 */
export function useIngest(options: Parameters<typeof startIngest>[1] = {}): { readonly nats: NatsHarness; readonly ingest: IngestHarness } {
  let nats: NatsHarness | undefined;
  let ingest: IngestHarness | undefined;
  beforeAll(async () => {
    nats = await startNats();
    ingest = await startIngest(nats, options);
  });
  afterAll(async () => {
    await ingest?.close();
    await nats?.stop();
  });
  return {
    get nats() {
      return nats!;
    },
    get ingest() {
      return ingest!;
    },
  };
}

/** POSTs a body with Transfer-Encoding: chunked (no Content-Length), as streaming clients do. */
export function postChunked(
  url: string,
  chunks: Iterable<Uint8Array | string>,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const req = request(
      { host: target.hostname, port: target.port, path: target.pathname, method: "POST", headers: { "content-type": "application/json", ...headers, "transfer-encoding": "chunked" } },
      (res) => {
        let text = "";
        res.on("data", (c) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode!, json: JSON.parse(text) }));
      },
    );
    // The server may answer (and stop reading) before the whole body is sent.
    req.on("error", (err: NodeJS.ErrnoException) => (err.code === "EPIPE" || err.code === "ECONNRESET" ? undefined : reject(err)));
    for (const chunk of chunks) req.write(chunk);
    req.end();
  });
}
