// Temporary directories for tests, removed when the test file is done, failed tests included, so
// a run leaves nothing behind in the OS's temp dir (CI machines and laptops run it many times).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";

const made: string[] = [];

// Registered when a test file first imports this module, so it runs after the file's own
// afterAll hooks (vitest runs them last-registered first): processes those hooks stop may still
// be writing into these directories until then.
afterAll(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A fresh directory `trackhook-<purpose>-XXXXXX` under the OS's temp dir. */
export function tempDir(purpose: string): string {
  const dir = mkdtempSync(join(tmpdir(), `trackhook-${purpose}-`));
  made.push(dir);
  return dir;
}
