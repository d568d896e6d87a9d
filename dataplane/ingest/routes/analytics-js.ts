// analytics.js itself, so a site can load Segment's snippet from trackhook instead of Segment's
// CDN: GET /analytics.js/v1/<writeKey>/analytics.min.js is the standalone build of the pinned
// @segment/analytics-next, and GET /analytics-next/bundles/<file> the chunks it loads on demand
// from its CDN host (the `ajs_*` query-string parameters, middleware, ...). Served from the files
// the package ships (precompressed .gz included), read once on first use and kept in memory.
import { existsSync, readdirSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { errors } from "../errors.ts";
import type { IngestState } from "../state.ts";

/** webpack's chunk names: `<name>.bundle.<content hash>.js`. */
const BUNDLE = /^[\w-]+\.bundle\.[0-9a-f]{8,}\.js$/;

interface Asset {
  raw: Buffer;
  gzip: Buffer;
}

export function analyticsJsRoutes(app: FastifyInstance, state: IngestState): void {
  const dir = packageDir();
  // Only these names are ever read: a request names one of them or gets a 404.
  const bundles = new Set(dir ? readdirSync(dir).filter((f) => BUNDLE.test(f)) : []);
  const cache = new Map<string, Promise<Asset>>();
  const load = (file: string) => {
    let asset = cache.get(file);
    if (!asset) {
      asset = Promise.all([readFile(join(dir!, file)), readFile(join(dir!, `${file}.gz`))]).then(([raw, gzip]) => ({ raw, gzip }));
      asset.catch(() => cache.delete(file)); // a failed read is tried again next time
      cache.set(file, asset);
    }
    return asset;
  };

  app.get<{ Params: { writeKey: string } }>("/analytics.js/v1/:writeKey/analytics.min.js", async (request, reply) => {
    if (!dir) throw errors.notFound("analytics.js is not installed with this trackhook (@segment/analytics-next)");
    if (!state.directory.find(request.params.writeKey)) throw errors.notFound("Unknown write key");
    // Short: a new trackhook version brings a new analytics.js, whose bundles have other names.
    return send(request, reply, await load("standalone.js"), "public, max-age=300");
  });

  app.get<{ Params: { file: string } }>("/analytics-next/bundles/:file", async (request, reply) => {
    if (!bundles.has(request.params.file)) throw errors.notFound(`No analytics.js bundle ${request.params.file}`);
    return send(request, reply, await load(request.params.file), "public, max-age=31536000, immutable");
  });
}

function send(request: FastifyRequest, reply: FastifyReply, asset: Asset, cacheControl: string): Buffer {
  reply
    .header("content-type", "text/javascript; charset=utf-8")
    .header("cache-control", cacheControl)
    .header("x-content-type-options", "nosniff")
    // Added to the CORS hook's "Origin", not in place of it.
    .header("vary", [reply.getHeader("vary"), "Accept-Encoding"].filter(Boolean).join(", "));
  if (acceptsGzip(request.headers["accept-encoding"])) {
    reply.header("content-encoding", "gzip");
    return asset.gzip;
  }
  return asset.raw;
}

/** Whether an Accept-Encoding header takes gzip: named (or `*`) with a quality above 0. */
function acceptsGzip(header: string | undefined): boolean {
  const quality = new Map<string, number>();
  for (const part of (header ?? "").split(",")) {
    const [name, ...params] = part.split(";").map((s) => s.trim().toLowerCase());
    if (!name) continue;
    const q = params.find((p) => p.startsWith("q="));
    quality.set(name, q === undefined ? 1 : Number(q.slice(2)) || 0);
  }
  return (quality.get("gzip") ?? quality.get("x-gzip") ?? quality.get("*") ?? 0) > 0;
}

/**
 * analytics.js: the copy `npm run build` puts in dist/vendor/ (scripts/copy-analytics-js.ts; the
 * image has only that), else dist/umd of @segment/analytics-next in node_modules (a dev
 * dependency: run from the sources). Undefined when neither is there (or whole).
 */
function packageDir(): string | undefined {
  // From dist/dataplane/ingest/routes/: dist/vendor/analytics-next/umd.
  const built = fileURLToPath(new URL("../../../vendor/analytics-next/umd", import.meta.url));
  if (existsSync(join(built, "standalone.js"))) return built;
  try {
    const dir = join(dirname(createRequire(import.meta.url).resolve("@segment/analytics-next/package.json")), "dist", "umd");
    return existsSync(join(dir, "standalone.js")) ? dir : undefined;
  } catch {
    return undefined;
  }
}
