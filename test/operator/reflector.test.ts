// A reflector whose list or watch fails says so, for how long and why: the operator's readiness,
// its metric and its faster resync read it (found by a review: with `list secrets` revoked, key
// rotations waited for the 10-minute resync while every status said all was well).
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
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

  it("a watch refused while lists work is failing all along, and backs off (found by a review: it listed again every second and was never seen failing)", async () => {
    let watches = 0;
    const server = createServer((_req, res) => {
      watches++;
      res.writeHead(403, { "content-type": "application/json" }).end(JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Failure", message: 'secrets is forbidden: cannot watch resource "secrets"', reason: "Forbidden", code: 403 }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "c", server: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }],
      users: [{ name: "u" }], contexts: [{ name: "x", cluster: "c", user: "u" }], currentContext: "x",
    });
    let lists = 0;
    const reflector = new Reflector({ kc, path: "/api/v1/secrets", list: async () => (lists++, { items: [], metadata: { resourceVersion: "1" } }), onEvent: () => {}, log: createLogger({ level: "silent" }) });
    try {
      await reflector.start();
      await new Promise((r) => setTimeout(r, 5_000));
      expect(reflector.failing.forMs).toBeGreaterThan(4_000);
      expect(reflector.failing.error).toMatch(/^watch: /);
      // 1, 2, 4 s of backoff: not a list a second.
      expect(watches).toBeLessThanOrEqual(4);
      expect(lists).toBeLessThanOrEqual(5);
    } finally {
      reflector.stop();
      server.close();
    }
  }, 15_000);
});

