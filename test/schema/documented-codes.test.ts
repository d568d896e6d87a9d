// Every code a user can meet in an answer, a metric label, an attempt record or a dead letter is
// explained in docs/operations.md: a code added without its line there fails here (found by a
// review: `url_paused` was in dead letters and metrics, and in no doc).
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { INGEST_ERROR_CODES, REJECT_REASONS } from "../../dataplane/ingest/mod.ts";
import { DELIVERY_ERROR_CODES } from "../../dataplane/delivery/outcome.ts";
import { DEAD_LETTER_FAILURES, DEAD_LETTER_REASONS } from "../../dataplane/delivery/metrics.ts";

const operations = readFileSync(new URL("../../docs/operations.md", import.meta.url), "utf8");

describe("docs/operations.md explains every code", () => {
  it.each([
    ["ingest error answers", INGEST_ERROR_CODES],
    ["messages not accepted", REJECT_REASONS],
    ["attempt errors", DELIVERY_ERROR_CODES],
    ["dead-letter reasons", DEAD_LETTER_REASONS],
    ["dead letters not stored", DEAD_LETTER_FAILURES],
  ] as const)("%s", (_what, codes) => {
    const missing = codes.filter((code) => !operations.includes(`\`${code}\``));
    expect(missing).toEqual([]);
  });
});
