// The per-URL pauses every message of a destination respects: Retry-After, and the breaker for a
// URL that does not answer at all. Pure logic, on a clock of its own: note(url, outcome, sentAt, now).
import { describe, expect, it } from "vitest";
import { UrlPauses } from "../../dataplane/delivery/url-pause.ts";
import type { AttemptOutcome } from "../../dataplane/delivery/outcome.ts";

const URL = "https://hooks.example/a";
const timeout: AttemptOutcome = { kind: "retry", error: "timeout" };
const refused: AttemptOutcome = { kind: "retry", error: "connection_refused" };
const ok: AttemptOutcome = { kind: "delivered", status: 200 };
const options = { threshold: 3, baseMs: 1_000, maxMs: 3_000 };
/** claim()'s wait for a probe's result: its timeout plus a margin for the result to be recorded. */
const PROBE_MS = 500;

describe("UrlPauses", () => {
  it("opens after `threshold` attempts in a row without an answer, and lets everything through before", () => {
    const pauses = new UrlPauses(options);
    expect(pauses.note(URL, timeout, 0, 0)).toBeUndefined();
    expect(pauses.note(URL, refused, 0, 0)).toBeUndefined();
    expect(pauses.claim(URL, 0, PROBE_MS)).toBe(true);
    expect(pauses.note(URL, timeout, 0, 10)).toEqual({ kind: "paused", reason: "unreachable", forMs: 1_000 });
    expect(pauses.claim(URL, 500, PROBE_MS)).toBe(false);
    expect(pauses.pausedUntil(URL, 500)).toBe(1_010);
  });

  it("an egress proxy that fails (proxy_error) pauses the URL like a receiver that does not answer", () => {
    const pauses = new UrlPauses(options);
    const proxyFailed: AttemptOutcome = { kind: "retry", error: "proxy_error" };
    expect(pauses.note(URL, proxyFailed, 0, 0)).toBeUndefined();
    expect(pauses.note(URL, proxyFailed, 0, 0)).toBeUndefined();
    expect(pauses.note(URL, proxyFailed, 0, 10)).toEqual({ kind: "paused", reason: "unreachable", forMs: 1_000 });
  });

  it("an answer in between, even a 500, starts the count again", () => {
    const pauses = new UrlPauses(options);
    pauses.note(URL, timeout, 0, 0);
    pauses.note(URL, timeout, 0, 0);
    expect(pauses.note(URL, { kind: "retry", status: 500 }, 0, 0)).toBeUndefined();
    expect(pauses.note(URL, timeout, 0, 0)).toBeUndefined();
    expect(pauses.claim(URL, 1, PROBE_MS)).toBe(true);
  });

  it("the other rounds in flight when it opened change nothing: one pause, told once, not doubled (regression: 100 timeouts at once paused it for the 5-minute maximum)", () => {
    const pauses = new UrlPauses(options);
    const changes = Array.from({ length: 100 }, (_, i) => pauses.note(URL, timeout, 0, 1_000 + i)).filter(Boolean);
    expect(changes).toEqual([{ kind: "paused", reason: "unreachable", forMs: 1_000 }]);
    expect(pauses.pausedUntil(URL, 1_500)).toBe(1_002 + 1_000);
  });

  it("after the pause, one round probes; a failed probe reopens for twice as long (up to maxMs), an answer resumes", () => {
    const pauses = new UrlPauses(options);
    for (let i = 0; i < 3; i++) pauses.note(URL, timeout, 0, 0);
    expect(pauses.claim(URL, 1_000, PROBE_MS)).toBe(true); // the probe
    expect(pauses.claim(URL, 1_001, PROBE_MS)).toBe(false); // the others wait for it,
    expect(pauses.claim(URL, 1_000 + PROBE_MS + 10, PROBE_MS)).toBe(false); // past its timeout too, until its result is in
    expect(pauses.note(URL, timeout, 1_000, 1_000 + PROBE_MS + 20)).toEqual({ kind: "paused", reason: "unreachable", forMs: 2_000 });
    const reopened = 1_000 + PROBE_MS + 20;
    expect(pauses.claim(URL, reopened + 2_000, PROBE_MS)).toBe(true);
    expect(pauses.note(URL, timeout, reopened + 2_000, reopened + 2_500)).toEqual({ kind: "paused", reason: "unreachable", forMs: 3_000 });
    expect(pauses.claim(URL, reopened + 5_500, PROBE_MS)).toBe(true);
    expect(pauses.note(URL, ok, reopened + 5_500, reopened + 5_600)).toEqual({ kind: "resumed" });
    expect(pauses.empty).toBe(true);
    expect(pauses.claim(URL, reopened + 5_601, PROBE_MS)).toBe(true);
    expect(pauses.claim(URL, reopened + 5_602, PROBE_MS)).toBe(true);
  });

  it("a Retry-After pauses the URL for every message, and is told once however many rounds bring it", () => {
    const pauses = new UrlPauses(options);
    const slowDown: AttemptOutcome = { kind: "retry", status: 429, retryAfterMs: 30_000 };
    expect(pauses.note(URL, slowDown, 0, 0)).toEqual({ kind: "paused", reason: "retry_after", forMs: 30_000 });
    expect(pauses.note(URL, slowDown, 0, 10)).toBeUndefined();
    // A 200 to a round sent before the pause does not end it.
    expect(pauses.note(URL, ok, 0, 20)).toBeUndefined();
    expect(pauses.claim(URL, 29_000, PROBE_MS)).toBe(false);
    expect(pauses.claim(URL, 30_010, PROBE_MS)).toBe(true);
    expect(pauses.note(URL, ok, 30_010, 30_100)).toBeUndefined();
    expect(pauses.empty).toBe(true);
  });

  it("a receiver's answer about one message (a 404) does not pause the URL", () => {
    const pauses = new UrlPauses(options);
    for (let i = 0; i < 5; i++) pauses.note(URL, { kind: "permanent", status: 404 }, 0, 0);
    expect(pauses.claim(URL, 1, PROBE_MS)).toBe(true);
  });

  it("a certificate failing verification pauses the URL as no answer does: it fails every message alike until it is replaced", () => {
    const pauses = new UrlPauses(options);
    const tls: AttemptOutcome = { kind: "retry", error: "tls_verification_failed" };
    pauses.note(URL, tls, 0, 0);
    pauses.note(URL, tls, 0, 0);
    expect(pauses.note(URL, tls, 0, 0)).toEqual({ kind: "paused", reason: "unreachable", forMs: 1_000 });
    expect(pauses.claim(URL, 1, PROBE_MS)).toBe(false);
  });

  it("paused() lists the URLs nothing is sent to now, and why, while their pause lasts (a breaker's probe in flight included)", () => {
    const pauses = new UrlPauses(options);
    const OTHER = "https://hooks.example/b";
    const list = (now: number) => [...pauses.paused(now)];
    pauses.note(URL, timeout, 0, 0);
    pauses.note(URL, timeout, 0, 0);
    expect(list(0)).toEqual([]); // not yet at the threshold
    pauses.note(URL, timeout, 0, 0); // the breaker opens for 1 s
    pauses.note(OTHER, { kind: "retry", status: 503, retryAfterMs: 10_000 }, 0, 0);
    expect(list(500)).toEqual([{ url: URL, reason: "unreachable" }, { url: OTHER, reason: "retry_after" }]);
    // Its pause is over and no message has come to probe it: not known to be down (regression,
    // found by a review: listed until the next message, a receiver back overnight kept its alert).
    expect(list(5_000)).toEqual([{ url: OTHER, reason: "retry_after" }]);
    // A message probes it: paused while the probe is out. The Retry-After has ended.
    expect(pauses.claim(URL, 10_001, PROBE_MS)).toBe(true);
    expect(list(10_001)).toEqual([{ url: URL, reason: "unreachable" }]);
    pauses.note(URL, ok, 10_001, 10_050);
    expect(list(10_050)).toEqual([]);
  });
});
