// Copies analytics.js (dist/umd of @segment/analytics-next, a dev dependency) into
// dist/vendor/analytics-next/, which ingest serves at /analytics.js/v1/<writeKey>/analytics.min.js.
// The browser bundle is all ingest needs of the package: as a production dependency it brought 22
// packages (node-fetch 2, whatwg-url 5, ...) into the image that never run there, and that image
// scanners report all the same (found by a supply-chain review).
import { cpSync, existsSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const from = dirname(createRequire(join(root, "package.json")).resolve("@segment/analytics-next/package.json"));
const to = join(root, "dist", "vendor", "analytics-next");
if (!existsSync(join(from, "dist", "umd", "standalone.js"))) throw new Error(`${from} has no dist/umd/standalone.js: run npm ci`);
rmSync(to, { recursive: true, force: true });
// Source maps (1.3 of its 1.7 MB) are never served.
cpSync(join(from, "dist", "umd"), join(to, "umd"), { recursive: true, filter: (path) => !/\.map(\.gz)?$/.test(path) });
// MIT: its licence and version go with the copy.
for (const file of ["LICENSE.MD", "package.json"]) cpSync(join(from, file), join(to, file));
