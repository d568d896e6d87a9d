// StatusWrites: a reconcile that runs on a cached copy older than this operator's last status
// write works from that write (regression from a review: on such a copy, the status built anew had
// a later inEffectSince and lastTransitionTime, so it was written a second time and moved them).
import { describe, expect, it } from "vitest";
import { StatusWrites, setReady, type DestinationResource, type OperatorContext, type SourceResource } from "../../operator/reconcile/context.ts";

const destination = (resourceVersion: string, status?: DestinationResource["status"]): DestinationResource =>
  ({ kind: "WebhookDestination", metadata: { name: "d", namespace: "ns", uid: "uid-1", resourceVersion }, spec: {}, ...(status ? { status } : {}) }) as unknown as DestinationResource;

describe("StatusWrites", () => {
  const written = { inEffectSince: "2026-11-22T10:00:00.000Z", urlCount: 1 };

  it("gives a copy older than the write the written status, until the cache has the write", () => {
    const writes = new StatusWrites();
    writes.wrote(destination("10"), "12", written);
    // The finalizer's event (11), made before the status write (12), reaches the cache after it.
    const stale = destination("11");
    expect(writes.fresh(stale)?.status).toEqual(written);
    expect(writes.current(stale)).toEqual(written);
    expect(stale.status, "the cached object itself is left alone").toBeUndefined();
    // The write's own event: the cache is the truth again, whatever it says from now on.
    const caughtUp = destination("12", { ...written, urlCount: 2 });
    expect(writes.fresh(caughtUp)).toEqual(caughtUp);
    expect(writes.fresh(destination("11"))?.status).toBeUndefined();
  });

  it("leaves objects it never wrote as they are", () => {
    const writes = new StatusWrites();
    const other = destination("5", written);
    expect(writes.fresh(other)).toEqual(other);
    expect(writes.fresh(undefined)).toBeUndefined();
  });

  it("never hands out the cached object: a status written through the copy leaves the cache as the watch left it (regression: the write's own event then showed no Ready flip, and a destination kept saying its Source took no messages)", async () => {
    const ctx = {
      statusWrites: new StatusWrites(),
      deliveryHealth: { conditions: (_object: unknown, conditions: unknown) => conditions },
      kube: { custom: { patchNamespacedCustomObjectStatus: async () => ({ metadata: { resourceVersion: "8" } }) } },
      events: { record: async () => {} },
      log: { info() {}, warn() {} },
    } as unknown as OperatorContext;
    const refused = { type: "Ready", status: "False", reason: "DuplicateWriteKey", message: "", lastTransitionTime: "2026-11-22T10:00:00Z" };
    const cached = { kind: "Source", metadata: { name: "copy", namespace: "ns", uid: "uid-copy", resourceVersion: "7", generation: 1 }, spec: {}, status: { conditions: [refused] } } as unknown as SourceResource;
    const source = ctx.statusWrites.fresh(cached)!;
    await setReady(ctx, source, { status: "True", reason: "Reconciled", message: "the write key is accepted by ingest" });
    expect(cached.status!.conditions).toEqual([refused]);
    expect(source.status!.conditions![0]).toMatchObject({ status: "True", reason: "Reconciled" });
  });
});

describe("a status the API server refuses", () => {
  it("is told in a Warning event, once per object every 10 minutes, and the reconcile still fails (found by a review: with */status forbidden, new Sources showed nothing at all)", async () => {
    const events: Array<[string, string, string]> = [];
    const forbidden = Object.assign(new Error('sources.trackhook.io "web" is forbidden: cannot patch resource "sources/status"'), { code: 403 });
    const ctx = {
      statusWrites: new StatusWrites(),
      deliveryHealth: { conditions: (_object: unknown, conditions: unknown) => conditions },
      kube: { custom: { patchNamespacedCustomObjectStatus: async () => { throw forbidden; } } },
      events: { record: async (_o: unknown, type: string, reason: string, message: string) => void events.push([type, reason, message]) },
      log: { info() {}, warn() {} },
    } as unknown as OperatorContext;
    const source = { kind: "Source", metadata: { name: "web", namespace: "ns", uid: "uid-status-1", generation: 1 }, spec: {} } as unknown as SourceResource;
    const ready = { status: "True", reason: "Reconciled", message: "the write key is accepted by ingest" } as const;
    await expect(setReady(ctx, source, ready)).rejects.toThrow("forbidden");
    await expect(setReady(ctx, source, ready)).rejects.toThrow("forbidden");
    expect(events).toEqual([["Warning", "StatusWriteFailed", expect.stringContaining("Ready=True Reconciled (the write key is accepted by ingest) could not be written to status")]]);
  });
});
