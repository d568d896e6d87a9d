// The words of what a reload changed: dev's config lines (tested through `dev` in cli.test.ts) and
// the `config reloaded` log line (reload.test.ts).
import { describe, expect, it } from "vitest";
import { configChanges } from "../../dataplane/config/mod.ts";
import type { CompiledConfig, CompiledDestination, CompiledSource } from "../../schema/mod.ts";

const source = (name: string, more: Partial<CompiledSource> = {}): CompiledSource => ({ namespace: "default", name, enabled: true, writeKeySha256: "a".repeat(64), ...more });
const webhook = (name: string, more: Partial<CompiledDestination> = {}): CompiledDestination => ({
  namespace: "default", name, enabled: true, sources: ["web"], urls: ["http://127.0.0.1:9/hook"], headers: [],
  timeoutMs: 5_000, retryWindowMs: 14_400_000, maxInFlight: 100, standardWebhooks: false, ...more,
});
const config = (sources: CompiledSource[], destinations: CompiledDestination[] = []): CompiledConfig => ({ sources, destinations });

describe("configChanges", () => {
  it("names what was added, removed, enabled and disabled", () => {
    const before = config([source("web"), source("old")], [webhook("a"), webhook("b", { enabled: false }), webhook("gone")]);
    const after = config([source("web", { enabled: false }), source("new", { enabled: false })], [webhook("a", { enabled: false }), webhook("b"), webhook("c")]);
    expect(configChanges(before, after)).toEqual([
      "source default/web disabled: its write keys are refused (401) now",
      "source default/new added, disabled",
      "source default/old removed: its write keys are refused (401) now",
      "webhook default/a disabled: nothing more is sent to it; what it has not been sent is kept a minute, in case it comes back",
      "webhook default/b enabled",
      "webhook default/c added",
      "webhook default/gone removed: nothing more is sent to it; what it has not been sent is kept a minute, in case it comes back",
    ]);
  });

  it("says when a webhook's sourceSelector matches no Source, as the operator's Ready message does (found by a parity review)", () => {
    const before = config([source("web")], [webhook("a"), webhook("b", { enabled: false })]);
    const after = config([source("web")], [webhook("a", { sources: [] }), webhook("b", { sources: [] }), webhook("c", { sources: [] }), webhook("d", { sources: [], enabled: false })]);
    expect(configChanges(before, after)).toEqual([
      "webhook default/a changed (sources): its sourceSelector matches no Source: nothing reaches it",
      "webhook default/b enabled: its sourceSelector matches no Source: nothing reaches it",
      "webhook default/c added: its sourceSelector matches no Source: nothing reaches it",
      "webhook default/d added, disabled",
    ]);
  });

  it("names changed fields as the YAML does, never their values", () => {
    const before = config([source("web")], [webhook("a", { sharedSecret: "s3cret-one" })]);
    const after = config([source("web", { writeKeySha256: "b".repeat(64), rateLimit: { perSecond: 10, burst: 20 } })], [webhook("a", { sharedSecret: "s3cret-two", timeoutMs: 2_000, retryWindowMs: 60_000 })]);
    const changes = configChanges(before, after);
    expect(changes).toEqual(["source default/web changed (write key, rateLimit)", "webhook default/a changed (shared secret, timeout, retryWindow)"]);
    expect(changes.join()).not.toContain("s3cret");
  });

  it("says nothing of what no source or webhook acts on (a file's time), nor of a removed one that was disabled", () => {
    const at = (time: string) => ({ createdAt: time });
    expect(configChanges(config([source("web")], [webhook("a", at("2026-11-24T10:00:00.000Z"))]), config([source("web")], [webhook("a", at("2026-11-24T11:00:00.000Z"))]))).toEqual([]);
    expect(configChanges(config([], [webhook("off", { enabled: false })]), config([], []))).toEqual(["webhook default/off removed"]);
  });
});
