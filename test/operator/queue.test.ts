// The operator's work queue and Ready condition: pure logic, so tested without a cluster.
import { describe, expect, it } from "vitest";
import { createLogger } from "../../dataplane/logging.ts";
import { withReady } from "../../operator/conditions.ts";
import { WorkQueue } from "../../operator/queue.ts";

const log = createLogger({ level: "silent" });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("WorkQueue", () => {
  it("queues a key once, runs one reconcile per key at a time, and re-runs a key changed meanwhile", async () => {
    const runs: string[] = [];
    let running = 0;
    let maxSameKey = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const queue = new WorkQueue({
      name: "t", log, concurrency: 1, // "b" waits while "a" holds the only slot
      handler: async (key) => {
        runs.push(key);
        if (key === "a") {
          running++;
          maxSameKey = Math.max(maxSameKey, running);
          if (runs.length === 1) await gate;
          running--;
        }
      },
    });
    queue.add("a");
    await sleep(5);
    queue.add("a"); // while "a" runs: marked dirty, runs once more afterwards
    queue.add("a");
    queue.add("b");
    queue.add("b"); // queued twice before it ran: once
    await sleep(5);
    release();
    await sleep(20);
    expect(runs.filter((k) => k === "a")).toHaveLength(2);
    expect(runs.filter((k) => k === "b")).toHaveLength(1);
    expect(maxSameKey).toBe(1);
    await queue.stop();
  });

  it("retries a failing key with growing delays, and honours requeueAfterMs", async () => {
    const times: number[] = [];
    let requeued = 0;
    const queue = new WorkQueue({
      name: "t", log, baseDelayMs: 20, maxDelayMs: 1000,
      handler: async (key) => {
        if (key === "poll") {
          requeued++;
          return requeued < 3 ? { requeueAfterMs: 10 } : undefined;
        }
        times.push(Date.now());
        if (times.length < 4) throw new Error("not yet");
      },
    });
    queue.add("flaky");
    queue.add("poll");
    await sleep(400);
    expect(times).toHaveLength(4);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    expect(gaps[0]).toBeGreaterThanOrEqual(18); // 20, 40, 80 ms
    expect(gaps[2]).toBeGreaterThan(gaps[0]!);
    expect(requeued).toBe(3);
    await queue.stop();
  });
});

describe("withReady", () => {
  const t0 = new Date("2026-01-01T00:00:00.123Z");
  const t1 = new Date("2026-01-01T01:00:00Z");

  it("keeps lastTransitionTime while the status stays, and moves it when the status flips", () => {
    const first = withReady(undefined, { status: "False", reason: "SecretNotFound", message: "m" }, 1, t0);
    expect(first).toEqual([{ type: "Ready", status: "False", reason: "SecretNotFound", message: "m", observedGeneration: 1, lastTransitionTime: "2026-01-01T00:00:00Z" }]);
    const sameStatus = withReady(first, { status: "False", reason: "SecretKeyMissing", message: "m2" }, 2, t1);
    expect(sameStatus[0]).toMatchObject({ reason: "SecretKeyMissing", observedGeneration: 2, lastTransitionTime: "2026-01-01T00:00:00Z" });
    const flipped = withReady(sameStatus, { status: "True", reason: "Reconciled", message: "ok" }, 2, t1);
    expect(flipped[0]).toMatchObject({ status: "True", lastTransitionTime: "2026-01-01T01:00:00Z" });
  });

  it("leaves other condition types alone", () => {
    const other = { type: "Paused", status: "True" as const, reason: "User", message: "", lastTransitionTime: "2026-01-01T00:00:00Z" };
    expect(withReady([other], { status: "True", reason: "Reconciled", message: "" }, 1, t0)).toContainEqual(other);
  });
});
