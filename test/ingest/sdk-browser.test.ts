// The official browser SDK, analytics.js 2.0 (@segment/analytics-next, pinned in package.json),
// works against trackhook unchanged in a real headless Chromium. The page is served from another
// origin than the ingest, so the browser applies CORS as on a real site: the SDK fetches its
// settings from GET /v1/projects/<writeKey>/settings (cdnURL, or the snippet's _cdn, pointed at the
// ingest), then posts each call to /v1/{i,t,p,g,a} on the host those settings name, as text/plain
// with Basic auth, each preflighted. Everything lands in TRACKHOOK_EVENTS as sent; a wrong write
// key loads no settings and sends nothing, and a wrong key in given settings gets a 401 the SDK can
// read. Chromium comes from scripts/tools-browser.sh and is driven by test/sdk/browser/chromium.ts.
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { randomName } from "../harness/nats.ts";
import { WRITE_KEY, basic, storedMessages, useIngest } from "../harness/ingest.ts";
import { isoNearNow, storedAs, type Json } from "../harness/sdk.ts";
import { Chromium, type Page } from "../sdk/browser/chromium.ts";

// The ingest's default CORS setting ("*": any origin, echoed) is what is tested.
const env = useIngest();

const SDK_DIR = fileURLToPath(new URL("../../node_modules/@segment/analytics-next/", import.meta.url));
const SDK_VERSION = (JSON.parse(readFileSync(`${SDK_DIR}package.json`, "utf8")) as { version: string }).version;
/** What the UMD and standalone builds put in context.library.version ("npm:next-…" is the bundled npm build). */
const LIBRARY = { name: "analytics.js", version: `next-${SDK_VERSION}` };


// ---------------------------------------------------------------------------------------------
// The site: another origin (same loopback address, another port) serving the page and the SDK.

interface Site {
  origin: string;
  /** Serves `html` at a fresh path and returns its URL. */
  page(title: string, body: string): string;
  close(): Promise<void>;
}

async function startSite(): Promise<Site> {
  const pages = new Map<string, string>();
  const assets: Record<string, string> = {
    "/analytics-next/index.js": `${SDK_DIR}dist/umd/index.js`,
    "/analytics-next/standalone.js": `${SDK_DIR}dist/umd/standalone.js`,
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url!, "http://site").pathname;
    const html = pages.get(path);
    if (html !== undefined) {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" }).end(html);
    } else if (assets[path]) {
      res.writeHead(200, { "content-type": "text/javascript; charset=utf-8" }).end(readFileSync(assets[path]));
    } else {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found");
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let n = 0;
  return {
    origin,
    page(title, body) {
      const path = `/page-${++n}.html`;
      // The empty icon keeps the browser from asking for /favicon.ico.
      pages.set(path, `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title><link rel="icon" href="data:,"></head><body>${body}</body></html>`);
      return origin + path;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The npm-style start: AnalyticsBrowser.load() from the UMD build, with only these settings. */
function npmPage(site: Site, settings: Json): string {
  return site.page(
    "Browser SDK test",
    `<script src="/analytics-next/index.js"></script>
<script>
  window.sdkErrors = [];
  window.analytics = AnalyticsNext.AnalyticsBrowser.load(${JSON.stringify(settings)});
  analytics.on("error", (e) => sdkErrors.push({ code: e.code, reason: String(e.reason) }));
  window.loaded = analytics.then(() => "loaded", (err) => "failed: " + (err && err.message));
</script>`,
  );
}

/**
 * The snippet-style start: Segment's snippet (its stub queue, as in snippet 5.x, with the buffered
 * page context it adds to each call) with `_cdn` set to the self-hosted host, then the standalone
 * build from `src` (the site's copy, or trackhook's /analytics.js/v1/<key>/analytics.min.js).
 */
function snippetPage(site: Site, writeKey: string, cdn: string, calls: string, src = "/analytics-next/standalone.js"): string {
  return site.page(
    "Snippet test",
    `<script>
  (function () {
    var analytics = (window.analytics = window.analytics || []);
    analytics.methods = ["trackSubmit", "trackClick", "trackLink", "trackForm", "pageview", "identify", "reset", "group", "track", "ready", "alias", "debug", "page", "screen", "once", "off", "on", "addSourceMiddleware", "addIntegrationMiddleware", "setAnonymousId", "addDestinationMiddleware", "register"];
    analytics.factory = function (method) {
      return function () {
        var args = Array.prototype.slice.call(arguments);
        if (["track", "screen", "alias", "group", "page", "identify"].indexOf(method) > -1) {
          var canonical = document.querySelector("link[rel='canonical']");
          args.push({ __t: "bpc", c: (canonical && canonical.getAttribute("href")) || undefined, p: location.pathname, u: location.href, s: location.search, t: document.title, r: document.referrer });
        }
        args.unshift(method);
        analytics.push(args);
        return analytics;
      };
    };
    for (var i = 0; i < analytics.methods.length; i++) analytics[analytics.methods[i]] = analytics.factory(analytics.methods[i]);
    analytics._writeKey = ${JSON.stringify(writeKey)};
    analytics._cdn = ${JSON.stringify(cdn)};
    analytics.SNIPPET_VERSION = "5.2.1";
    ${calls}
  })();
</script>
<script src="${src}"></script>`,
  );
}

// ---------------------------------------------------------------------------------------------
// What reached the ingest, as its HTTP server saw it (preflights included). What it answered is
// taken from the browser, which is what CORS is about (Fastify's headers go out with writeHead).

interface IngestRequest {
  method: string;
  path: string;
  origin: string | undefined;
  contentType: string | undefined;
  authorization: string | undefined;
  requestMethod: string | undefined;
  requestHeaders: string | undefined;
  status: number;
}

function watchIngest(): { seen: IngestRequest[]; stop(): void; until(count: (seen: IngestRequest[]) => boolean, what: string): Promise<void> } {
  const seen: IngestRequest[] = [];
  // A second listener on the server only reads headers: the body stays Fastify's.
  const listener = (req: IncomingMessage, res: ServerResponse) =>
    res.once("finish", () => {
      seen.push({
        method: req.method!,
        path: req.url!,
        origin: req.headers.origin,
        contentType: req.headers["content-type"],
        authorization: req.headers.authorization,
        requestMethod: req.headers["access-control-request-method"],
        requestHeaders: req.headers["access-control-request-headers"],
        status: res.statusCode,
      });
    });
  env.ingest.app.server.on("request", listener);
  return {
    seen,
    stop: () => env.ingest.app.server.off("request", listener),
    async until(done, what) {
      const deadline = Date.now() + 10_000;
      while (!done(seen)) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; the ingest saw ${JSON.stringify(seen, null, 1)}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------

let launched: Promise<Chromium>;
let site: Site;
let page: Page | undefined;
let ingest: ReturnType<typeof watchIngest> | undefined;

beforeAll(async () => {
  // A missing browser fails each test with what to run (a failed beforeAll would skip them).
  launched = Chromium.launch();
  launched.catch(() => undefined);
  site = await startSite();
});
afterAll(async () => {
  await (await launched.catch(() => undefined))?.close();
  await site?.close();
});
afterEach(async () => {
  ingest?.stop();
  ingest = undefined;
  await page?.close();
  page = undefined;
});

/** The events posted by the browser to the ingest, parsed from the bodies it sent. */
function sentEvents(p: Page): Array<{ url: string; headers: Record<string, string>; body: Json }> {
  return p.requests
    .filter((r) => r.method === "POST" && r.url.startsWith(env.ingest.url))
    .map((r) => ({ url: r.url, headers: r.headers, body: JSON.parse(r.postData ?? "null") as Json }));
}

/**
 * Asserts the CORS exchange: the settings fetched without a preflight, every POST (in any order)
 * preflighted for its own URL, all from the page's origin, and every answer allowing that origin.
 */
async function expectCorsExchange(p: Page, seen: IngestRequest[], writeKey: string, eventPaths: string[]) {
  expect(seen[0]).toMatchObject({ method: "GET", path: `/v1/projects/${writeKey}/settings`, origin: site.origin, status: 200 });
  const posts = seen.filter((r) => r.method === "POST");
  expect(posts.map((r) => r.path).sort()).toEqual([...eventPaths].sort());
  for (const post of posts) {
    expect(post).toMatchObject({ origin: site.origin, contentType: "text/plain", status: 200 });
    expect(post.authorization).toBe(basic(writeKey));
    // Authorization is not a CORS-safelisted header: the browser asked first, for this very URL.
    const preflight = seen.slice(0, seen.indexOf(post)).find((r) => r.method === "OPTIONS" && r.path === post.path);
    expect(preflight, `preflight of POST ${post.path}`).toMatchObject({ origin: site.origin, requestMethod: "POST", requestHeaders: "authorization", status: 204 });
  }
  expect(seen.filter((r) => !["GET", "POST", "OPTIONS"].includes(r.method))).toEqual([]);
  expect(seen).toHaveLength(1 + 2 * eventPaths.length);

  // DevTools reports a request (preflights included) a moment after the server has answered it.
  const toIngest = () => p.requests.filter((r) => r.url.startsWith(env.ingest.url));
  await p.waitFor(() => toIngest().length >= seen.length, "the browser's record of every request to the ingest");
  await p.settled();
  const answers = toIngest();
  expect(answers.map((r) => r.method).sort()).toEqual(seen.map((r) => r.method).sort());
  for (const answer of answers) {
    expect(answer.responseHeaders, `${answer.method} ${answer.url}`).toMatchObject({ "access-control-allow-origin": site.origin });
    if (answer.method === "OPTIONS") {
      expect(answer.responseHeaders).toMatchObject({ "access-control-allow-headers": "authorization", "access-control-allow-methods": expect.stringContaining("POST") });
    }
  }
}

/** No CORS error, no failed request, nothing outside the two origins, no console error. */
function expectCleanBrowser(p: Page, allowedProblems: RegExp[] = []) {
  expect(p.issues.filter((i) => i.code === "CorsIssue")).toEqual([]);
  expect(p.requests.filter((r) => r.failed)).toEqual([]);
  expect(p.requests.filter((r) => !r.url.startsWith(site.origin) && !r.url.startsWith(env.ingest.url)).map((r) => r.url)).toEqual([]);
  expect(p.problems.filter((text) => !allowedProblems.some((re) => re.test(text)))).toEqual([]);
}

/** Each sent event is stored once, as sent: same fields, the browser's context, trackhook's timestamps. */
async function expectStoredAsSent(sent: Array<{ body: Json }>) {
  const stored = await storedMessages(env.nats);
  const byId = new Map(stored.map((m) => [m.body.messageId, m]));
  for (const { body: item } of sent) {
    const messageId = item.messageId as string;
    expect(messageId).toMatch(/^ajs-next-/);
    const body = storedAs(byId, item.type, messageId);
    expect(stored.filter((m) => m.body.messageId === messageId)).toHaveLength(1);
    expect(body).not.toHaveProperty("writeKey");
    for (const field of ["type", "userId", "anonymousId", "event", "name", "category", "properties", "traits", "groupId", "previousId", "integrations", "_metadata"]) {
      expect(body[field], `${String(item.type)}.${field}`).toEqual(item[field]);
    }
    // The ingest adds the browser's address, as Segment does for client-side events.
    expect(body.context, `${String(item.type)}.context`).toEqual({ ...(item.context as Json), ip: "127.0.0.1" });
    expect(body.sentAt).toBe(item.sentAt);
    expect(body.originalTimestamp).toBe(item.timestamp);
    isoNearNow(body.receivedAt);
    isoNearNow(body.timestamp);
  }
  return stored;
}

describe("@segment/analytics-next in Chromium", () => {
  it("with only writeKey and cdnURL, loads its settings from the ingest and delivers identify, track, page, group and alias through CORS", async () => {
    ingest = watchIngest();
    const userId = randomName("user");
    const groupId = randomName("group");
    const previousId = randomName("legacy");
    page = await (await launched).open(npmPage(site, { writeKey: WRITE_KEY, cdnURL: env.ingest.url }));
    expect(await page.evaluate("window.loaded"), page.problems.join("\n")).toBe("loaded");

    const result = await page.evaluate<{ delivered: Array<{ type: string; failed: string | null }>; errors: unknown[]; userAgent: string; href: string; segmentio: unknown }>(`(async () => {
      const a = window.analytics;
      const [instance] = await a;
      const segmentio = instance.queue.plugins.find((p) => p.name === "Segment.io").metadata;
      const delivered = [];
      const record = (ctx) => delivered.push({ type: ctx.event.type, failed: ctx.failedDelivery() ? String(ctx.failedDelivery().reason) : null });
      record(await a.identify(${JSON.stringify(userId)}, { email: "ada@example.com", plan: "pro", logins: 3 }));
      record(await a.track("Order Completed", { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] }));
      record(await a.page("Docs", "Quickstart", { section: "intro" }));
      record(await a.group(${JSON.stringify(groupId)}, { name: "Initech", employees: 120 }));
      record(await a.alias(${JSON.stringify(userId)}, ${JSON.stringify(previousId)}));
      return { delivered, errors: window.sdkErrors, userAgent: navigator.userAgent, href: location.href, segmentio };
    })()`);
    // The settings came from the ingest and named it (as the browser reached it) as the API host.
    expect(result.segmentio).toEqual({ writeKey: WRITE_KEY, apiHost: `${new URL(env.ingest.url).host}/v1`, protocol: "http" });
    expect(result.delivered).toEqual(["identify", "track", "page", "group", "alias"].map((type) => ({ type, failed: null })));
    expect(result.errors).toEqual([]);

    await expectCorsExchange(page, ingest.seen, WRITE_KEY, ["/v1/i", "/v1/t", "/v1/p", "/v1/g", "/v1/a"]);
    const settings = page.requests.find((r) => r.url === `${env.ingest.url}/v1/projects/${WRITE_KEY}/settings`);
    expect(settings).toMatchObject({ method: "GET", resourceType: "Fetch", status: 200 });
    expectCleanBrowser(page);

    const sent = sentEvents(page);
    expect(sent.map((s) => s.url)).toEqual(["i", "t", "p", "g", "a"].map((p) => `${env.ingest.url}/v1/${p}`));
    for (const { headers, body } of sent) {
      expect(headers["Content-Type"]).toBe("text/plain");
      expect(body.writeKey).toBe(WRITE_KEY);
      expect(body.context).toMatchObject({ library: LIBRARY, userAgent: result.userAgent, page: { url: result.href, path: new URL(result.href).pathname, title: "Browser SDK test", referrer: "" } });
      expect((body.context as Json).userAgent).toContain("Chrome/");
      isoNearNow(body.sentAt);
      isoNearNow(body.timestamp);
    }
    const stored = await expectStoredAsSent(sent);

    // The values themselves, so that an SDK change cannot make the comparison above vacuous.
    const storedOf = (type: string) => stored.find((m) => m.body.messageId === sent.find((s) => s.body.type === type)!.body.messageId)!.body as unknown as Json;
    const anonymousId = sent[0]!.body.anonymousId;
    expect(anonymousId).toEqual(expect.any(String));
    expect(storedOf("identify")).toMatchObject({ userId, anonymousId, traits: { email: "ada@example.com", plan: "pro", logins: 3 } });
    // The SDK remembers the identified user (in the page's storage) for the calls after identify.
    expect(storedOf("track")).toMatchObject({ userId, anonymousId, event: "Order Completed", properties: { orderId: "o-1", revenue: 42.5, items: [{ sku: "a" }] } });
    expect(storedOf("page")).toMatchObject({
      userId,
      category: "Docs",
      name: "Quickstart",
      properties: { section: "intro", category: "Docs", name: "Quickstart", url: result.href, path: new URL(result.href).pathname, title: "Browser SDK test" },
    });
    expect(storedOf("group")).toMatchObject({ userId, groupId, traits: { name: "Initech", employees: 120 } });
    // alias(to, from): analytics-next stamps the identified user on every event, so `to` is that user here.
    expect(storedOf("alias")).toMatchObject({ userId, previousId });
    for (const m of stored.filter((s) => sent.some((e) => e.body.messageId === s.body.messageId))) {
      expect(m.body.context).toMatchObject({ library: LIBRARY, page: { url: result.href }, userAgent: result.userAgent });
    }
    expect(JSON.stringify(stored)).not.toContain(WRITE_KEY);
  });

  it("started by the snippet with _cdn pointed at the ingest, delivers the calls queued before it loaded", async () => {
    ingest = watchIngest();
    const userId = randomName("snippet");
    page = await (await launched).open(
      snippetPage(site, WRITE_KEY, env.ingest.url, `analytics.page(); analytics.identify(${JSON.stringify(userId)}, { plan: "free" }); analytics.track("Signed Up", { via: "snippet" });`),
    );
    await ingest.until((seen) => seen.filter((r) => r.method === "POST").length >= 3, "three POSTs");
    // The queued calls are replayed each in its own task, so their requests overlap.
    await expectCorsExchange(page, ingest.seen, WRITE_KEY, ["/v1/p", "/v1/i", "/v1/t"]);
    expectCleanBrowser(page);
    expect(await page.evaluate("window.analytics.initialized === true && window.analytics.user().id()")).toBe(userId);

    const sent = sentEvents(page);
    for (const { body } of sent) expect(body.context).toMatchObject({ library: LIBRARY, page: { title: "Snippet test" } });
    const stored = await expectStoredAsSent(sent);
    const mine = stored.filter((m) => sent.some((s) => s.body.messageId === m.body.messageId)).map((m) => m.body as unknown as Json);
    expect(mine.map((m) => m.type).sort()).toEqual(["identify", "page", "track"]);
    expect(mine.find((m) => m.type === "page")).toMatchObject({ anonymousId: expect.any(String), properties: { title: "Snippet test" } });
    expect(mine.find((m) => m.type === "identify")).toMatchObject({ userId, traits: { plan: "free" } });
    expect(mine.find((m) => m.type === "track")).toMatchObject({ userId, event: "Signed Up", properties: { via: "snippet" } });
  });

  it("loaded by the snippet from the ingest as from Segment's CDN: analytics.js, its settings and the bundles it loads on demand all come from trackhook", async () => {
    ingest = watchIngest();
    const userId = randomName("cdn");
    const script = `${env.ingest.url}/analytics.js/v1/${WRITE_KEY}/analytics.min.js`;
    // On plain HTTP analytics.js cannot find its CDN host from the script tag (it looks for https://), hence _cdn.
    const url = snippetPage(site, WRITE_KEY, env.ingest.url, "analytics.page();", script);
    // Segment's query-string API: analytics.js loads its queryString bundle to identify and track these.
    page = await (await launched).open(`${url}?ajs_uid=${userId}&ajs_event=Promo%20Seen&ajs_prop_campaign=fall`);
    await ingest.until((seen) => seen.filter((r) => r.method === "POST").length >= 3, "three POSTs");
    // DevTools reports a request a moment after the server has answered it.
    await page.waitFor((p) => sentEvents(p).length >= 3, "the browser's record of the three POSTs");
    await page.settled();

    const gets = ingest.seen.filter((r) => r.method === "GET");
    expect(gets.map((r) => r.path)).toEqual([
      `/analytics.js/v1/${WRITE_KEY}/analytics.min.js`,
      `/v1/projects/${WRITE_KEY}/settings`,
      expect.stringMatching(/^\/analytics-next\/bundles\/queryString\.bundle\.[0-9a-f]+\.js$/),
    ]);
    expect(gets.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(ingest.seen.filter((r) => r.method === "POST").map((r) => r.path).sort()).toEqual(["/v1/i", "/v1/p", "/v1/t"]);
    expectCleanBrowser(page);
    expect(page.requests.filter((r) => r.url.startsWith(site.origin) && !r.url.startsWith(`${site.origin}/page-`))).toEqual([]);

    const sent = sentEvents(page);
    for (const { body } of sent) expect(body.context).toMatchObject({ library: LIBRARY });
    const stored = await expectStoredAsSent(sent);
    const mine = stored.filter((m) => sent.some((s) => s.body.messageId === m.body.messageId)).map((m) => m.body as unknown as Json);
    expect(mine.find((m) => m.type === "identify")).toMatchObject({ userId });
    expect(mine.find((m) => m.type === "track")).toMatchObject({ userId, event: "Promo Seen", properties: { campaign: "fall" } });
    expect(mine.find((m) => m.type === "page")).toMatchObject({ properties: { title: "Snippet test" } });
  });

  it("with a wrong write key loads no settings, sends nothing and stores nothing", async () => {
    ingest = watchIngest();
    const marker = randomName("rejected");
    page = await (await launched).open(npmPage(site, { writeKey: "not-a-real-key", cdnURL: env.ingest.url }));
    const loaded = await page.evaluate<string>("window.loaded");
    // loadCDNSettings() throws the body of the non-2xx answer, which the browser could read (CORS headers on the 404).
    expect(loaded).toMatch(/^failed: .*Unknown write key/);
    // A call on an instance that failed to load is never sent (its promise does not settle).
    const tracked = await page.evaluate<string>(`Promise.race([
      window.analytics.track("Should Not Land", { marker: ${JSON.stringify(marker)} }).then(() => "sent", (e) => "refused: " + e.message),
      new Promise((resolve) => setTimeout(() => resolve("not sent"), 500)),
    ])`);
    expect(tracked).not.toBe("sent");

    expect(ingest.seen).toEqual([expect.objectContaining({ method: "GET", path: "/v1/projects/not-a-real-key/settings", origin: site.origin, status: 404 })]);
    await page.settled();
    const answer = page.requests.find((r) => r.url.endsWith("/v1/projects/not-a-real-key/settings"));
    expect(answer).toMatchObject({ status: 404, responseHeaders: { "access-control-allow-origin": site.origin } });
    // The SDK logs that answer; the browser logs the 404. Nothing else, and no CORS error.
    expectCleanBrowser(page, [/status of 404 \(Not Found\)/, /^console\.error: .*"Unknown write key"/]);
    expect(page.problems).toHaveLength(2);
    expect(sentEvents(page)).toEqual([]);
    const stored = await storedMessages(env.nats);
    expect(JSON.stringify(stored)).not.toContain(marker);
  });

  it("with a wrong write key in settings given inline, gets a 401 it can read, drops the event, and nothing is stored", async () => {
    ingest = watchIngest();
    const marker = randomName("rejected");
    const apiHost = `${new URL(env.ingest.url).host}/v1`;
    page = await (await launched).open(
      npmPage(site, { writeKey: "not-a-real-key", cdnSettings: { integrations: { "Segment.io": { apiKey: "not-a-real-key", apiHost, protocol: "http" } } } }),
    );
    expect(await page.evaluate("window.loaded"), page.problems.join("\n")).toBe("loaded");
    const result = await page.evaluate<{ failed: string | null; errors: Array<{ code: string; reason: string }> }>(`(async () => {
      const ctx = await window.analytics.track("Should Not Land", { marker: ${JSON.stringify(marker)} });
      return { failed: ctx.failedDelivery() ? String(ctx.failedDelivery().reason) : null, errors: window.sdkErrors };
    })()`);
    // A 4xx other than 408/410/429/460 is not retried: one request, and the SDK says why.
    expect(result.failed).toBe("NonRetryableError: Non-retryable error: 401");
    expect(result.errors).toEqual([{ code: "delivery_failure", reason: "NonRetryableError: Non-retryable error: 401" }]);
    expect(ingest.seen.map((r) => `${r.method} ${r.path} ${r.status}`)).toEqual(["OPTIONS /v1/t 204", "POST /v1/t 401"]);
    expect(ingest.seen[1]).toMatchObject({ origin: site.origin, requestMethod: undefined });
    await page.waitFor((p) => p.requests.filter((r) => r.url.startsWith(env.ingest.url)).length >= 2, "both requests in the browser's record");
    await page.settled();
    const answers = page.requests.filter((r) => r.url === `${env.ingest.url}/v1/t`).map((r) => [r.method, r.status, r.responseHeaders?.["access-control-allow-origin"]]);
    expect(answers.sort()).toEqual([
      ["OPTIONS", 204, site.origin],
      ["POST", 401, site.origin],
    ]);
    // The browser itself logs the 401 as a failed resource load; nothing else, and no CORS error.
    expectCleanBrowser(page, [/status of 401/]);

    const stored = await storedMessages(env.nats);
    expect(JSON.stringify(stored)).not.toContain(marker);
  });
});
