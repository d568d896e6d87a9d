// A reflector whose list or watch fails says so, for how long and why: the operator's readiness,
// its metric and its faster resync read it (found by a review: with `list secrets` revoked, key
// rotations waited for the 10-minute resync while every status said all was well).
import { KubeConfig } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../dataplane/logging.ts";
import { Reflector } from "../../operator/kube/reflector.ts";

describe("Reflector", () => {
  it("tells how long its list has been failing and why, and nothing once it works", async () => {
    let refuse = true;
    const reflector = new Reflector({
      kc: new KubeConfig(),
      path: "/api/v1/secrets",
      list: async () => {
        if (refuse) throw new Error('secrets is forbidden: cannot list resource "secrets"');
        return { items: [], metadata: { resourceVersion: "1" } };
      },
      onEvent: () => {},
      log: createLogger({ level: "silent" }),
    });
    expect(reflector.failing).toEqual({ forMs: 0, error: "" });
    const started = reflector.start();
    await new Promise((r) => setTimeout(r, 300));
    expect(reflector.failing.forMs).toBeGreaterThanOrEqual(250);
    expect(reflector.failing.error).toBe('list: secrets is forbidden: cannot list resource "secrets"');
    refuse = false;
    await started; // the next try (after a 1 s backoff) lists
    expect(reflector.failing).toEqual({ forMs: 0, error: "" });
    reflector.stop();
  });
});
