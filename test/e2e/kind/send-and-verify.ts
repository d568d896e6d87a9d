// The kind e2e's client side (run by run.sh, not by vitest): sends events with the official
// @segment/analytics-node SDK to the ingest (through a port-forward), then polls the in-cluster
// receiver until every one of them arrived, checking each delivery's X-Signature (hex HMAC-SHA1 of
// the exact body with the destination's shared secret) and body.
//
//   INGEST_URL=http://127.0.0.1:18080 RECEIVER_URL=http://127.0.0.1:18081 \
//   WRITE_KEY=... SHARED_SECRET=... node test/e2e/kind/send-and-verify.ts
import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { Analytics } from "@segment/analytics-node";

interface Received {
  headers: Record<string, string>;
  body: string;
}

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const ingestUrl = env("INGEST_URL");
const receiverUrl = env("RECEIVER_URL");
const writeKey = env("WRITE_KEY");
const sharedSecret = env("SHARED_SECRET");
const events = Number(process.env.EVENTS ?? "25");
const deadlineMs = Number(process.env.DELIVERY_TIMEOUT_MS ?? "120000");

const log = (line: string) => console.log(`e2e: ${line}`);

/** The operator has to put the key in the config bucket and ingest has to load it: wait for a 200. */
async function waitForWriteKey(): Promise<void> {
  const until = Date.now() + 90_000;
  let last = "";
  while (Date.now() < until) {
    try {
      const res = await fetch(`${ingestUrl}/v1/identify`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Basic ${Buffer.from(`${writeKey}:`).toString("base64")}` },
        body: JSON.stringify({ userId: "e2e-warmup", messageId: `warmup-${randomUUID()}` }),
      });
      last = `${res.status} ${await res.text()}`;
      if (res.status === 200) return;
    } catch (err) {
      last = (err as Error).message;
    }
    await sleep(1000);
  }
  throw new Error(`the ingest never accepted the write key (last answer: ${last})`);
}

async function send(): Promise<string[]> {
  const analytics = new Analytics({ writeKey, host: ingestUrl, path: "/v1/batch", maxEventsInBatch: 10, flushInterval: 500, httpRequestTimeout: 10_000, maxRetries: 3 });
  const errors: unknown[] = [];
  const statuses: number[] = [];
  const messageIds: string[] = [];
  analytics.on("error", (err) => errors.push(err));
  analytics.on("http_response", (res) => statuses.push(res.status));
  analytics.on("http_request", (req) => {
    for (const item of (JSON.parse(req.body) as { batch: Array<{ messageId: string }> }).batch) messageIds.push(item.messageId);
  });
  const userId = `e2e-${randomUUID()}`;
  analytics.identify({ userId, traits: { email: "e2e@example.com", plan: "pro" } });
  for (let i = 0; i < events - 2; i++) analytics.track({ userId, event: "E2E Event", properties: { i } });
  analytics.page({ userId, name: "E2E", properties: { url: "https://example.com/e2e" } });
  await analytics.closeAndFlush({ timeout: 30_000 });
  if (errors.length) throw new Error(`the SDK reported errors: ${errors.map(String).join("; ")}`);
  if (statuses.some((s) => s !== 200)) throw new Error(`the ingest answered ${statuses.join(", ")}`);
  if (messageIds.length !== events) throw new Error(`the SDK sent ${messageIds.length} messages, expected ${events}`);
  log(`sent ${events} messages in ${statuses.length} batches, all answered 200`);
  return messageIds;
}

function verifySignature(delivery: Received): string | undefined {
  const body = Buffer.from(delivery.body, "base64");
  const expected = createHmac("sha1", sharedSecret).update(body).digest();
  const got = Buffer.from(delivery.headers["x-signature"] ?? "", "hex");
  if (got.length !== expected.length || !timingSafeEqual(got, expected)) return `bad X-Signature ${delivery.headers["x-signature"]}`;
  return undefined;
}

async function verify(messageIds: string[]): Promise<void> {
  const wanted = new Set(messageIds);
  const until = Date.now() + deadlineMs;
  let seen = new Map<string, Received>();
  while (Date.now() < until) {
    const res = await fetch(`${receiverUrl}/received`);
    const all = (await res.json()) as Received[];
    seen = new Map();
    for (const delivery of all) {
      const body = JSON.parse(Buffer.from(delivery.body, "base64").toString("utf8")) as { messageId?: string };
      if (body.messageId && wanted.has(body.messageId)) seen.set(body.messageId, delivery);
    }
    if (seen.size === wanted.size) break;
    await sleep(1000);
  }
  const missing = messageIds.filter((id) => !seen.has(id));
  if (missing.length) throw new Error(`${missing.length} of ${messageIds.length} messages never reached the receiver, e.g. ${missing.slice(0, 3).join(", ")}`);
  const problems: string[] = [];
  for (const [id, delivery] of seen) {
    const bad = verifySignature(delivery);
    if (bad) problems.push(`${id}: ${bad}`);
    const body = JSON.parse(Buffer.from(delivery.body, "base64").toString("utf8")) as Record<string, unknown>;
    if (body.version !== 1) problems.push(`${id}: version ${String(body.version)}`);
    if (typeof body.receivedAt !== "string") problems.push(`${id}: no receivedAt`);
    if (!delivery.headers["x-delivery-id"]) problems.push(`${id}: no X-Delivery-Id`);
    if (!/^trackhook\//.test(delivery.headers["user-agent"] ?? "")) problems.push(`${id}: User-Agent ${delivery.headers["user-agent"]}`);
    if (delivery.headers["content-type"] !== "application/json") problems.push(`${id}: Content-Type ${delivery.headers["content-type"]}`);
  }
  if (problems.length) throw new Error(`deliveries arrived but are wrong:\n  ${problems.join("\n  ")}`);
  log(`the receiver got all ${messageIds.length} messages, each with a valid X-Signature`);
}

try {
  await waitForWriteKey();
  await verify(await send());
} catch (err) {
  console.error(`e2e: FAILED: ${(err as Error).message}`);
  process.exit(1);
}
