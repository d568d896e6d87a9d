// Fault test: the nats-server is SIGKILLed while a client is sending, kept down, and restarted on
// the same port and store. Proves the ingest's contract across the outage: it keeps answering
// (503 storage_unavailable with Retry-After, never a false 200), every 200 survives the crash,
// and a client that re-sends everything afterwards gets 200s without creating duplicates.
import { describe, expect, it } from "vitest";
import { EVENTS_STREAM } from "../../dataplane/nats/mod.ts";
import { randomName } from "../harness/nats.ts";
import { WRITE_KEY, basic, storedMessages, useIngest } from "../harness/ingest.ts";

// A short publish timeout keeps requests made during the outage (and the test) short.
const env = useIngest({ ingest: { publishTimeoutMs: 1000, retryAfterSeconds: 2 } });

/** One HTTP request: a single /v1/track message or a small /v1/batch of track messages. */
interface Unit {
  path: "/v1/track" | "/v1/batch";
  ids: string[];
  body: unknown;
}

interface Outcome {
  unit: Unit;
  /** 0 when the request itself failed (it must not). */
  status: number;
  retryAfter: string | null;
  code: unknown;
  success: unknown;
  start: number;
  end: number;
}

const RUN = randomName("fault");
const trackMessage = (id: string) => ({ type: "track", userId: `user-${RUN}`, event: "Fault Test", messageId: id, properties: { id } });

/**
 * `count` requests carrying track messages: every 4th a /v1/batch of 3, the others a single
 * /v1/track, so both routes see the whole timeline.
 */
function makeUnits(label: string, count: number): Unit[] {
  let n = 0;
  const nextId = () => `${RUN}-${label}-${n++}`;
  return Array.from({ length: count }, (_, i): Unit => {
    if (i % 4 === 3) {
      const ids = [nextId(), nextId(), nextId()];
      return { path: "/v1/batch", ids, body: { batch: ids.map(trackMessage) } };
    }
    const id = nextId();
    return { path: "/v1/track", ids: [id], body: trackMessage(id) };
  });
}

async function send(unit: Unit): Promise<Outcome> {
  const start = performance.now();
  try {
    const res = await fetch(`${env.ingest.url}${unit.path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: basic(WRITE_KEY) },
      body: JSON.stringify(unit.body),
      // Far above the publish timeout: a request that hangs this long is a failure in itself.
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    const json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    return { unit, status: res.status, retryAfter: res.headers.get("retry-after"), code: json.code, success: json.success, start, end: performance.now() };
  } catch {
    return { unit, status: 0, retryAfter: null, code: undefined, success: undefined, start, end: performance.now() };
  }
}

/** Sends units with `concurrency` workers, recording each outcome as soon as it is answered. */
async function sendAll(units: Unit[], concurrency: number, record: (o: Outcome) => void, pauseMs = 0): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < units.length) {
      record(await send(units[next++]!));
      if (pauseMs) await sleep(pauseMs);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls until `check` is true; fails the test after `timeoutMs` instead of hanging. */
async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function ready(): Promise<boolean> {
  const res = await fetch(`${env.ingest.url}/readyz`).catch(() => undefined);
  return res?.status === 200;
}

async function streamAnswers(): Promise<boolean> {
  return env.nats.jsm.streams.info(EVENTS_STREAM).then(() => true, () => false);
}

describe("nats-server killed under load", () => {
  it("answers 503 while down, keeps every 200, and takes a full re-send without duplicates", { timeout: 110_000 }, async () => {
    // Traffic before and through the kill runs free; the last part is held back until the restart
    // has begun, so requests also arrive while the server comes back and the ingest reconnects.
    const early = makeUnits("early", 280); // 420 messages
    const late = makeUnits("late", 60); // 90 messages
    // Sent by the test itself while the server is known to be down, so the outage is always observed.
    const probes = makeUnits("probe", 8); // 12 messages
    const allUnits = [...early, ...late, ...probes];
    const allIds = allUnits.flatMap((u) => u.ids);
    expect(new Set(allIds).size).toBe(allIds.length);

    const outcomes: Outcome[] = [];
    const record = (o: Outcome) => outcomes.push(o);

    let releaseLate!: () => void;
    const restartBegun = new Promise<void>((resolve) => (releaseLate = resolve));
    const traffic = (async () => {
      // A short pause per request stretches the traffic over the outage instead of racing past it.
      const earlyDone = sendAll(early, 6, record, 5);
      await restartBegun;
      await Promise.all([earlyDone, sendAll(late, 4, record)]);
    })();

    // Kill in the middle of the stream of requests, while some are in flight.
    await until("100 answers before the kill", () => outcomes.length >= 100);
    const killedWith200 = outcomes.filter((o) => o.status === 200).length;
    await env.nats.server.kill("SIGKILL");
    const downFrom = performance.now();

    const probeOutcomes = await Promise.all(probes.map(send));
    probeOutcomes.forEach(record);
    const heldFor = performance.now() - downFrom;
    if (heldFor < 1500) await sleep(1500 - heldFor);
    const downUntil = performance.now();

    releaseLate();
    await env.nats.server.restart();
    await traffic;

    // Sanity of the setup itself: the kill really came mid-stream and after successful requests.
    expect(killedWith200).toBeGreaterThan(0);
    expect(outcomes.length).toBe(allUnits.length);
    expect(outcomes.filter((o) => o.start > downUntil).length).toBeGreaterThan(0);

    // (a) Everything sent and answered while the server was down got a 503 storage_unavailable.
    const duringOutage = outcomes.filter((o) => o.start >= downFrom && o.end <= downUntil);
    expect(duringOutage.length).toBeGreaterThanOrEqual(probes.length);
    for (const o of duringOutage) {
      expect({ status: o.status, success: o.success, code: o.code, retryAfter: o.retryAfter }).toEqual({
        status: 503,
        success: false,
        code: "storage_unavailable",
        retryAfter: "2",
      });
    }
    for (const o of probeOutcomes) expect(o.status).toBe(503);
    // Nothing is left unanswered or answered with anything but 200 or 503, at any point.
    for (const o of outcomes) expect([200, 503]).toContain(o.status);

    // Both the ingest's connection and the test's own must be back before reading the stream.
    await until("/readyz 200 after the restart", ready);
    await until("the harness connection to answer again", streamAnswers);

    // (b) Every message whose request got a 200 survived the SIGKILL.
    const acked = outcomes.filter((o) => o.status === 200).flatMap((o) => o.unit.ids);
    expect(acked.length).toBeGreaterThan(0);
    const afterCrash = await storedMessages(env.nats);
    const storedIds = afterCrash.map((m) => m.body.messageId);
    const storedSet = new Set(storedIds);
    expect(acked.filter((id) => !storedSet.has(id))).toEqual([]);
    // A 503 does not promise the message was not stored, but nothing may be stored twice.
    expect(storedIds.length).toBe(storedSet.size);

    // (c) The client re-sends everything, acked or not, as an SDK retrying its queue would.
    const resent: Outcome[] = [];
    await sendAll(allUnits, 6, (o) => resent.push(o));
    expect(resent.filter((o) => o.status !== 200).map((o) => ({ status: o.status, code: o.code, ids: o.unit.ids }))).toEqual([]);

    const final = await storedMessages(env.nats);
    const counts = new Map<string, number>();
    for (const m of final) {
      counts.set(m.body.messageId, (counts.get(m.body.messageId) ?? 0) + 1);
      expect(m.subject).toBe("trackhook.events.default.web.track");
      expect(m.msgId).toBe(`default/web/${m.body.messageId}`);
    }
    expect(allIds.filter((id) => counts.get(id) !== 1)).toEqual([]);
    expect(final.length).toBe(allIds.length);
  });
});
