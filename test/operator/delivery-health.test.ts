// The Delivering condition's rules, on JetStream answers written here (the kube test runs them on
// a real nats-server and API server): what a restart of nats-server hides, how long DeadLettering
// holds, and what turning it off does to a condition an earlier run left.
import { describe, expect, it } from "vitest";
import { DeliveryHealth } from "../../operator/delivery-health.ts";
import type { DestinationResource } from "../../operator/reconcile/context.ts";

const WINDOW = 10_000;
const destination = { kind: "WebhookDestination", metadata: { name: "hook", namespace: "ns", uid: "uid-1", generation: 1 }, spec: { enabled: true } } as unknown as DestinationResource;
/** The destination as a new leader finds it: its status says DeadLettering. */
const shownDeadLettering = { ...destination, status: { conditions: [{ type: "Delivering", status: "False", reason: "DeadLettering", message: "", lastTransitionTime: "2026-11-24T00:00:00Z" }] } } as unknown as DestinationResource;

/** A consumer with `waiting` messages, its ack floor at `floor`, last acked at `lastActive` (absent: as after a nats-server restart). */
const consumer = (waiting: number, floor: number, lastActive?: number) => ({
  name: "dest_ns_hook",
  num_pending: 0,
  num_ack_pending: waiting,
  ack_floor: { stream_seq: floor, consumer_seq: floor, ...(lastActive !== undefined ? { last_active: new Date(lastActive).toISOString() } : {}) },
  config: { filter_subjects: ["trackhook.events.ns.web.>"] },
});

function harness(seen: DestinationResource = destination) {
  const state = { consumer: consumer(0, 0) as ReturnType<typeof consumer>, oldestStored: 0, deadLetters: 0, lastDeadLetterAt: 0, dlqLastSeq: 0, noEventsStream: false };
  const requeued: string[] = [];
  const events: string[] = [];
  const jsm = {
    consumers: {
      list: () => (async function* () {
        if (state.noEventsStream) throw Object.assign(new Error("stream not found"), { name: "StreamNotFoundError" });
        yield state.consumer;
      })(),
    },
    streams: {
      info: async () => ({ state: { subjects: state.deadLetters > 0 ? { "trackhook.dlq.ns.hook": state.deadLetters } : {}, last_seq: state.dlqLastSeq } }),
      getMessage: async (stream: string) => ({ time: new Date(stream === "TRACKHOOK_DLQ" ? state.lastDeadLetterAt : state.oldestStored) }),
    },
  };
  const health = new DeliveryHealth({
    jsm: jsm as never,
    destinations: { get: () => seen, list: () => [seen] },
    events: { record: async (_o: unknown, type: string, reason: string) => void events.push(`${type} ${reason}`) } as never,
    log: { warn() {}, info() {}, debug() {} } as never,
    requeue: (ns, name) => requeued.push(`${ns}/${name}`),
  }, { windowMs: WINDOW });
  const reason = () => health.conditions(seen, []).find((c) => c.type === "Delivering")?.reason;
  return { state, health, requeued, events, reason };
}

describe("DeliveryHealth", () => {
  it("a nats-server restart, which drops ack_floor.last_active until the next ack, does not read as NoProgress (found by a review: a destination delivering every 2 s showed NoProgress and two Events)", async () => {
    const { state, health, reason, events } = harness();
    const t0 = Date.now();
    // One message stuck in its retries since long ago, the others acked a moment ago.
    state.oldestStored = t0 - 10 * WINDOW;
    state.consumer = consumer(1, 5, t0 - 1000);
    await health.check();
    expect(reason()).toBe("Delivering");
    state.consumer = consumer(1, 5); // restarted: last_active gone, the floor where it was
    await health.check();
    expect(reason()).toBe("Delivering");
    expect(events).toEqual([]);
  });

  it("with nothing known of the last ack (no field, a new operator), watches a whole window before it says NoProgress", async () => {
    const { state, health, reason } = harness();
    state.oldestStored = Date.now() - 10 * WINDOW;
    state.consumer = consumer(1, 5);
    await health.check();
    expect(reason()).toBe("Delivering");
  });

  it("says NoProgress when nothing has been acked for the window and a message has waited as long", async () => {
    const { state, health, reason, events, requeued } = harness();
    state.oldestStored = Date.now() - 2 * WINDOW;
    state.consumer = consumer(3, 5, Date.now() - 2 * WINDOW);
    await health.check();
    expect(reason()).toBe("NoProgress");
    expect(events).toEqual(["Warning NoProgress"]);
    expect(requeued).toEqual(["ns/hook"]);
  });

  it("holds DeadLettering for three windows once set, so that a dead letter every few minutes does not flip it (found by a review)", async () => {
    const { state, health, reason, events } = harness();
    state.deadLetters = 1;
    state.lastDeadLetterAt = Date.now() - 1000;
    await health.check();
    expect(reason()).toBe("DeadLettering");
    // A window and a half later, with no new dead letter: still DeadLettering.
    state.lastDeadLetterAt = Date.now() - 1.5 * WINDOW;
    state.deadLetters = 2; // the count moved: the time is read again
    await health.check();
    expect(reason()).toBe("DeadLettering");
    state.lastDeadLetterAt = Date.now() - 3.5 * WINDOW;
    state.deadLetters = 3;
    await health.check();
    expect(reason()).toBe("Delivering");
    expect(events).toEqual(["Warning DeadLettering", "Normal Delivering"]);
  });

  it("sees dead letters of a replay that failed again, whose count is the same as before (found by a review: it stayed Delivering)", async () => {
    const { state, health, reason } = harness();
    state.deadLetters = 1;
    state.dlqLastSeq = 1;
    state.lastDeadLetterAt = Date.now() - 10 * WINDOW;
    await health.check();
    expect(reason()).toBe("Delivering");
    // Replayed (one dead letter removed) and dead-lettered again (one added): one, as before.
    state.dlqLastSeq = 2;
    state.lastDeadLetterAt = Date.now() - 500;
    await health.check();
    expect(reason()).toBe("DeadLettering");
  });

  it("holds DeadLettering across a restart or a new leader, from what the status shows (found by a review)", async () => {
    const { state, health, reason } = harness(shownDeadLettering);
    state.deadLetters = 1;
    state.dlqLastSeq = 1;
    state.lastDeadLetterAt = Date.now() - 1.5 * WINDOW;
    await health.check();
    expect(reason()).toBe("DeadLettering");
  });

  it("takes the condition out while the events stream is missing (no consumer to read), and does not call that a failed check", async () => {
    const { state, health } = harness(shownDeadLettering);
    state.noEventsStream = true;
    await health.check();
    expect(health.conditions(shownDeadLettering, []).find((c) => c.type === "Delivering")).toBeUndefined();
  });

  it("turned off, it takes out a Delivering condition an earlier run left", () => {
    const off = new DeliveryHealth({} as never, { windowMs: 0 });
    const left = [{ type: "Ready", status: "True" as const, reason: "Reconciled", message: "", lastTransitionTime: "2026-11-24T00:00:00Z" },
      { type: "Delivering", status: "False" as const, reason: "NoProgress", message: "", lastTransitionTime: "2026-11-24T00:00:00Z" }];
    expect(off.conditions(destination, left).map((c) => c.type)).toEqual(["Ready"]);
  });
});
