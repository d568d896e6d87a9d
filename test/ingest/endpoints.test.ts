// Every route real SDKs call, CORS for browsers, the analytics.js settings endpoint and
// analytics.js itself, health and metrics, and the 503 a full stream gives.
import { readFileSync, readdirSync } from "node:fs";
import { get as httpGet, type IncomingHttpHeaders } from "node:http";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MESSAGE_TYPES } from "../../schema/mod.ts";
import { EVENTS_STREAM } from "../../dataplane/nats/mod.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";
import { DEFAULT_STREAM, WRITE_KEY, basic, post, startIngest, storedMessages, uniqueId, useIngest, type IngestHarness } from "../harness/ingest.ts";

const env = useIngest({ ingest: { corsOrigins: ["https://shop.example", "https://www.example"] } });

const auth = { authorization: basic(WRITE_KEY) };
const bodies: Record<string, Record<string, unknown>> = {
  identify: { userId: "u1", traits: { email: "a@example.com" } },
  track: { userId: "u1", event: "Clicked" },
  page: { anonymousId: "a1", name: "Home" },
  screen: { userId: "u1", name: "Settings" },
  group: { userId: "u1", groupId: "g1" },
  alias: { userId: "u1", previousId: "a1" },
};

describe("routes", () => {
  for (const type of MESSAGE_TYPES) {
    for (const path of [type, type[0]!]) {
      it(`POST /v1/${path} stores a ${type}`, async () => {
        const messageId = uniqueId(path);
        // The path decides the type, whatever the body says.
        const res = await post(`${env.ingest.url}/v1/${path}`, { ...bodies[type], type: "bogus", messageId }, { headers: auth });
        expect(res).toMatchObject({ status: 200, json: { success: true } });
        const stored = (await storedMessages(env.nats)).find((m) => m.body.messageId === messageId);
        expect(stored?.subject).toBe(`trackhook.events.default.web.${type}`);
        expect(stored?.body.type).toBe(type);
      });
    }
  }

  // analytics-java posts to /v1/import/ (its DEFAULT_PATH), and Segment's API takes it.
  it("takes every route with a trailing or doubled slash too: analytics-java posts to <endpoint>/v1/import/", async () => {
    const batch = [{ ...bodies.track, type: "track", messageId: uniqueId("slash-import") }];
    expect((await post(`${env.ingest.url}/v1/import/`, { batch }, { headers: auth })).status).toBe(200);
    const single = uniqueId("slash-track");
    expect((await post(`${env.ingest.url}/v1/track/`, { ...bodies.track, messageId: single }, { headers: auth })).status).toBe(200);
    const stored = new Set((await storedMessages(env.nats)).map((m) => m.body.messageId));
    expect(stored.has(batch[0]!.messageId) && stored.has(single)).toBe(true);
    expect((await fetch(`${env.ingest.url}/v1/projects/${WRITE_KEY}/settings/`)).status).toBe(200);
    // .endpoint("https://events.example.com/") in analytics-java.
    const doubled = [{ ...bodies.track, type: "track", messageId: uniqueId("slash-double") }];
    expect((await post(`${env.ingest.url}//v1/import/`, { batch: doubled }, { headers: auth })).status).toBe(200);
    expect((await storedMessages(env.nats)).some((m) => m.body.messageId === doubled[0]!.messageId)).toBe(true);
  });

  for (const path of ["batch", "import", "b"]) {
    it(`POST /v1/${path} stores a batch of all six kinds, alias included`, async () => {
      const batch = MESSAGE_TYPES.map((type) => ({ ...bodies[type], type, messageId: uniqueId(`${path}-${type}`) }));
      const res = await post(`${env.ingest.url}/v1/${path}`, { batch }, { headers: auth });
      expect(res.status).toBe(200);
      const stored = new Map((await storedMessages(env.nats)).map((m) => [m.body.messageId, m]));
      for (const item of batch) expect(stored.get(item.messageId)?.subject).toBe(`trackhook.events.default.web.${item.type}`);
    });
  }
});

describe("CORS", () => {
  it("answers a preflight from an allowed origin with the headers browsers need", async () => {
    const res = await fetch(`${env.ingest.url}/v1/t`, {
      method: "OPTIONS",
      headers: { origin: "https://shop.example", "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type, x-retry-count" },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("https://shop.example");
    expect(res.headers.get("access-control-allow-credentials")).toBe("true");
    expect(res.headers.get("access-control-allow-methods")).toContain("POST");
    const allowed = res.headers.get("access-control-allow-headers")!.toLowerCase();
    for (const header of ["authorization", "content-type", "x-retry-count"]) expect(allowed).toContain(header);
  });

  it("adds CORS headers to the POST itself", async () => {
    const res = await fetch(`${env.ingest.url}/v1/t`, {
      method: "POST",
      headers: { origin: "https://www.example", "content-type": "text/plain" },
      body: JSON.stringify({ ...bodies.track, writeKey: WRITE_KEY }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBe("https://www.example");
    // Else a page cannot read a 429's or 503's Retry-After, and analytics-next backs off blindly.
    expect(res.headers.get("access-control-expose-headers")).toBe("Retry-After, X-Request-Id");
  });

  it("allows the extra headers a site configures in analytics-next (additionalHeaders)", async () => {
    const res = await fetch(`${env.ingest.url}/v1/t`, {
      method: "OPTIONS",
      headers: { origin: "https://shop.example", "access-control-request-method": "POST", "access-control-request-headers": "content-type, x-api-key" },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-headers")).toBe("content-type, x-api-key");
    expect(res.headers.get("vary")).toBe("Origin, Access-Control-Request-Headers");
  });

  it("gives no CORS grant on /metrics, /healthz and /readyz, which no web page should read (regression: granted, with credentials)", async () => {
    for (const path of ["/metrics", "/healthz", "/readyz"]) {
      // An origin granted on /v1 (above).
      const res = await fetch(`${env.ingest.url}${path}`, { headers: { origin: "https://www.example" } });
      expect(res.status, path).toBe(200);
      expect(res.headers.get("access-control-allow-origin"), path).toBeNull();
      expect(res.headers.get("access-control-allow-credentials"), path).toBeNull();
    }
  });

  it("gives no CORS grant to an origin that is not configured", async () => {
    const res = await fetch(`${env.ingest.url}/v1/t`, { method: "OPTIONS", headers: { origin: "https://evil.example", "access-control-request-method": "POST" } });
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("settings endpoint (analytics.js CDN settings)", () => {
  it("returns Segment.io settings pointing the browser SDK at this host", async () => {
    const res = await fetch(`${env.ingest.url}/v1/projects/${WRITE_KEY}/settings`, { headers: { origin: "https://shop.example" } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { integrations: Record<string, Record<string, unknown>>; metrics: { sampleRate: number } };
    const host = new URL(env.ingest.url).host;
    expect(body.integrations["Segment.io"]).toMatchObject({ apiKey: WRITE_KEY, apiHost: `${host}/v1`, protocol: "http" });
    expect(Object.keys(body.integrations)).toEqual(["Segment.io"]); // no legacy device-mode destinations
    expect(body.metrics.sampleRate).toBe(0); // SDK metrics would otherwise go to Segment
    expect(res.headers.get("access-control-allow-origin")).toBe("https://shop.example");
  });

  it("says https behind a TLS-terminating ingress (X-Forwarded-Proto), so browsers on HTTPS pages can send", async () => {
    const res = await fetch(`${env.ingest.url}/v1/projects/${WRITE_KEY}/settings`, { headers: { "x-forwarded-proto": "https" } });
    const body = (await res.json()) as { integrations: Record<string, Record<string, unknown>> };
    expect(body.integrations["Segment.io"]).toMatchObject({ apiHost: `${new URL(env.ingest.url).host}/v1`, protocol: "https" });
    expect(res.headers.get("cache-control")).toBe("private, max-age=60");
  });

  it("answers 404 for an unknown write key", async () => {
    const res = await fetch(`${env.ingest.url}/v1/projects/unknown-key/settings`);
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ success: false, code: "not_found" });
  });
});

describe("analytics.js served from the ingest (the snippet's CDN host)", () => {
  const umd = join(dirname(createRequire(import.meta.url).resolve("@segment/analytics-next/package.json")), "dist", "umd");
  const bundle = readdirSync(umd).find((f) => /^queryString\.bundle\.[0-9a-f]+\.js$/.test(f))!;
  /** A GET that neither asks for nor undoes compression unless told to. */
  const get = (path: string, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
      httpGet(`${env.ingest.url}${path}`, { headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c)).on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      }).on("error", reject);
    });

  it("serves the pinned standalone analytics.js for a known write key, gzipped when asked", async () => {
    const plain = await get(`/analytics.js/v1/${WRITE_KEY}/analytics.min.js`);
    expect(plain.status).toBe(200);
    expect(plain.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect(plain.headers["content-encoding"]).toBeUndefined();
    expect(plain.headers["cache-control"]).toBe("public, max-age=300");
    expect(plain.headers["x-content-type-options"]).toBe("nosniff");
    expect(plain.headers.vary).toMatch(/Accept-Encoding/);
    expect(plain.body.equals(readFileSync(join(umd, "standalone.js")))).toBe(true);

    const gzipped = await get(`/analytics.js/v1/${WRITE_KEY}/analytics.min.js`, { "accept-encoding": "gzip, deflate, br" });
    expect(gzipped.headers["content-encoding"]).toBe("gzip");
    expect(gzipped.body.length).toBeLessThan(plain.body.length / 2);
    expect(gunzipSync(gzipped.body).equals(plain.body)).toBe(true);

    // Quality 0 refuses gzip; "*" takes it unless gzip itself is refused.
    for (const [acceptEncoding, gzip] of [["gzip;q=0, br", false], ["br, *;q=0.1", true], ["*, gzip;q=0", false], ["identity", false], ["GZIP;Q=0.5", true]] as const) {
      const res = await get(`/analytics.js/v1/${WRITE_KEY}/analytics.min.js`, { "accept-encoding": acceptEncoding });
      expect(res.headers["content-encoding"], acceptEncoding).toBe(gzip ? "gzip" : undefined);
      expect((gzip ? gunzipSync(res.body) : res.body).equals(plain.body), acceptEncoding).toBe(true);
    }
  });

  it("answers 404 for an unknown or disabled write key", async () => {
    for (const key of ["unknown-key", "disabled-key"]) {
      const res = await get(`/analytics.js/v1/${key}/analytics.min.js`);
      expect(res.status).toBe(404);
      expect(JSON.parse(res.body.toString())).toMatchObject({ success: false, code: "not_found" });
    }
  });

  it("serves the bundles analytics.js loads on demand, cached for good, and nothing else from the package", async () => {
    const res = await get(`/analytics-next/bundles/${bundle}`, { "accept-encoding": "gzip" });
    expect(res.status).toBe(200);
    expect(res.headers["cache-control"]).toBe("public, max-age=31536000, immutable");
    expect(gunzipSync(res.body).equals(readFileSync(join(umd, bundle)))).toBe(true);
    for (const path of ["standalone.js", "index.js", `${bundle}.map`, "..%2Fpackage.json", "..%2F..%2Fpackage.json", "queryString.bundle.0000000000.js"]) {
      const other = await get(`/analytics-next/bundles/${path}`);
      expect(other.status, path).toBe(404);
      expect(JSON.parse(other.body.toString()), path).toMatchObject({ success: false, code: "not_found" });
    }
  });
});

describe("operations endpoints", () => {
  it("/healthz and /readyz answer 200 while JetStream is reachable", async () => {
    expect((await fetch(`${env.ingest.url}/healthz`)).status).toBe(200);
    const ready = await fetch(`${env.ingest.url}/readyz`);
    expect(ready.status).toBe(200);
  });

  it("/metrics exposes request, message and publish-latency metrics", async () => {
    const text = await (await fetch(`${env.ingest.url}/metrics`)).text();
    expect(text).toMatch(/trackhook_ingest_requests_total\{route="\/v1\/track",status="200",code="ok"\} \d+/);
    expect(text).toMatch(/trackhook_ingest_messages_total\{source="default\/web",outcome="accepted",reason=""\} \d+/);
    expect(text).toMatch(/trackhook_ingest_publish_duration_seconds_count \d+/);
  });
});

describe("a full stream", () => {
  let small: NatsHarness;
  let full: IngestHarness;
  beforeAll(async () => {
    small = await startNats();
    full = await startIngest(small, { stream: { ...DEFAULT_STREAM, maxBytes: 64 * 1024 }, ingest: { retryAfterSeconds: 7 } });
  });
  afterAll(async () => {
    await full?.close();
    await small?.stop();
  });

  it("answers 503 storage_full with Retry-After instead of 200 once max_bytes is reached", async () => {
    const answers: Array<{ status: number; code?: unknown; retryAfter: string | null; id: string }> = [];
    for (let i = 0; i < 40; i++) {
      const id = uniqueId("fill");
      const res = await post(`${full.url}/v1/track`, { userId: "u", event: "Fill", messageId: id, properties: { pad: "x".repeat(8 * 1024) } }, { headers: auth });
      answers.push({ status: res.status, code: res.json.code, retryAfter: res.headers.get("retry-after"), id });
    }
    const refused = answers.filter((a) => a.status !== 200);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((a) => a.status === 503 && a.code === "storage_full" && a.retryAfter === "7")).toBe(true);
    // Every 200 is in the stream; no refused message is.
    const stored = new Set((await storedMessages(small)).map((m) => m.body.messageId));
    for (const a of answers) expect(stored.has(a.id)).toBe(a.status === 200);
    // What an alert needs, before the 503s begin: how full the stream is.
    const text = await (await fetch(`${full.url}/metrics`)).text();
    const gauge = (name: string) => Number(new RegExp(`^${name}\\{stream="TRACKHOOK_EVENTS"\\} (\\d+)$`, "m").exec(text)?.[1]);
    expect(gauge("trackhook_events_stream_max_bytes")).toBe(64 * 1024);
    expect(gauge("trackhook_events_stream_bytes")).toBeGreaterThan(0.8 * 64 * 1024);
    expect(gauge("trackhook_events_stream_bytes")).toBeLessThanOrEqual(64 * 1024);
  });

  it("counts the messages of a batch that were stored before the stream filled up as accepted, only the rest as failed", async () => {
    const before = await messageCounts(full);
    const batch = Array.from({ length: 20 }, () => ({ type: "track", userId: "u", event: "Fill", messageId: uniqueId("part"), properties: { pad: "x".repeat(6 * 1024) } }));
    // The test above filled the stream: empty it, so that the 120KB batch fits in part.
    await small.jsm.streams.purge(EVENTS_STREAM);
    const res = await post(`${full.url}/v1/batch`, { batch }, { headers: auth });
    expect(res).toMatchObject({ status: 503, json: { code: "storage_full" } });
    const storedNow = (await storedMessages(small)).filter((m) => batch.some((b) => b.messageId === m.body.messageId)).length;
    expect(storedNow).toBeGreaterThan(0);
    expect(storedNow).toBeLessThan(batch.length);
    const after = await messageCounts(full);
    expect(after.accepted - before.accepted).toBe(storedNow);
    expect(after.failed - before.failed).toBe(batch.length - storedNow);
  });
});

async function messageCounts(ingest: IngestHarness): Promise<{ accepted: number; failed: number }> {
  const values = (await ingest.metrics.messages.get()).values;
  const sum = (outcome: string) => values.filter((v) => v.labels.outcome === outcome).reduce((total, v) => total + v.value, 0);
  return { accepted: sum("accepted"), failed: sum("failed") };
}
