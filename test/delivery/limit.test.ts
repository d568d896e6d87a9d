// The process's delivery slots, shared among destinations: bounded by the process's limit and
// each destination's maxInFlight, and no destination can take another's reserve.
import { describe, expect, it } from "vitest";
import { ACTIVE_FOR_MS, DeliverySlots } from "../../dataplane/delivery/limit.ts";

/** Takes slots of a share until it may take no more; returns how many it took. */
const fill = (share: { tryAcquire(): boolean }) => {
  let n = 0;
  while (share.tryAcquire()) n++;
  return n;
};

describe("DeliverySlots", () => {
  it("never lets more than max run at once, and runs everything in the end, in order of arrival", async () => {
    const share = new DeliverySlots(3).share(100);
    let running = 0;
    let peak = 0;
    const order: number[] = [];
    await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        await share.acquire();
        order.push(i);
        running++;
        peak = Math.max(peak, running);
        await new Promise((r) => setTimeout(r, 5));
        running--;
        share.release();
      }),
    );
    expect(peak).toBe(3);
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(share.inUse).toBe(0);
  });

  it("a destination busy alone may use every slot, up to its maxInFlight; beside idle ones, all but the lane kept for them", () => {
    const slots = new DeliverySlots(10);
    expect(fill(slots.share(100))).toBe(10);
    const shared = new DeliverySlots(10);
    const [busy] = [shared.share(100), shared.share(100)];
    expect(fill(busy)).toBe(5);
    expect(fill(new DeliverySlots(10).share(4))).toBe(4);
  });

  it("slow destinations cannot take another active destination's reserve (regression: two tarpits held every slot)", async () => {
    let now = 1_000_000;
    const slots = new DeliverySlots(9, () => now);
    const [slow1, slow2, healthy] = [slots.share(500), slots.share(500), slots.share(500)];
    // All three have delivered: active, each with a reserve of 3.
    for (const share of [slow1, slow2, healthy]) {
      expect(share.tryAcquire()).toBe(true);
      share.release();
    }
    expect(fill(slow1) + fill(slow2)).toBe(6);
    expect(slots.inUse).toBe(6);
    // The healthy one's three slots are there whenever it needs them, however long the slow ones hold theirs.
    now += ACTIVE_FOR_MS - 1;
    expect(fill(healthy)).toBe(3);
  });

  it("shares slots among tenants first, then among a tenant's destinations (regression: one tenant's 100 destinations left another's one 9 slots of 1,000)", () => {
    const slots = new DeliverySlots(1000);
    const many = Array.from({ length: 100 }, () => slots.share(100, "team-a"));
    const one = slots.share(1000, "team-b");
    // All active, every one with messages waiting.
    for (const share of [...many, one]) {
      expect(share.tryAcquire()).toBe(true);
      share.release();
    }
    for (const share of many) expect(fill(share)).toBe(5); // team-a's 500, 5 each
    expect(fill(one)).toBe(500); // team-b's half, however many destinations team-a has
    expect(slots.inUse).toBe(1000);
  });

  it("keeps a lane of max/N for an idle tenant's destination, not its whole share: the rest comes to it as borrowed slots free up (the diff review: an idle tenant kept half the process from a busy one)", () => {
    let now = 1_000_000;
    const slots = new DeliverySlots(12, () => now);
    const [a1, a2, a3] = [slots.share(100, "a"), slots.share(100, "a"), slots.share(100, "a")]; // 2 each
    const lone = slots.share(100, "b"); // a share of 6, idle: the lane is 12 / 4 = 3
    for (const share of [a1, a2, a3]) {
      expect(share.tryAcquire()).toBe(true);
      share.release();
    }
    now += 1;
    expect(fill(a1) + fill(a2) + fill(a3)).toBe(9); // all but the lane
    expect(fill(lone)).toBe(3); // with messages again, lone takes the lane at once
    for (let i = 0; i < 3; i++) a1.release(); // a1's borrowed slots, freed, are lone's
    expect(fill(a1)).toBe(0);
    expect(fill(lone)).toBe(3);
    expect(slots.inUse).toBe(12);
  });

  it("keeps no more of a lane than the idle destination's maxInFlight", () => {
    const slots = new DeliverySlots(1000);
    const busy = Array.from({ length: 10 }, () => slots.share(1000, "a"));
    slots.share(5, "b"); // idle, and never more than 5 in flight
    for (const share of busy) {
      expect(share.tryAcquire()).toBe(true);
      share.release();
    }
    expect(busy.reduce((sum, share) => sum + fill(share), 0)).toBe(995);
  });

  it("an idle destination's reserve is lent, but not the lane kept for idle ones; a destination active again gets its reserve before borrowers", async () => {
    let now = 1_000_000;
    const slots = new DeliverySlots(6, () => now);
    const [busy, quiet, newcomer] = [slots.share(100), slots.share(100), slots.share(100)]; // fair shares of 2
    expect(quiet.tryAcquire()).toBe(true);
    quiet.release();
    expect(fill(busy)).toBe(2); // quiet's reserve and the lane for idle newcomer are kept
    now += ACTIVE_FOR_MS;
    expect(fill(busy)).toBe(2); // quiet idle long enough: its reserve is lent, the lane is not
    expect(busy.inUse).toBe(4);
    expect(fill(quiet)).toBe(2); // with messages again, quiet takes the lane at once

    // Every slot in use. The borrower waits first, but the newcomer gets the next slot that frees.
    const order: string[] = [];
    const borrower = busy.acquire().then(() => order.push("busy"));
    const arrival = newcomer.acquire().then(() => order.push("newcomer"));
    busy.release();
    await arrival;
    expect(order).toEqual(["newcomer"]);
    busy.release(); // busy holds its reserve of 2 and more: the freed slot is kept for newcomer's reserve
    await Promise.resolve();
    expect(order).toEqual(["newcomer"]);
    expect(fill(newcomer)).toBe(1);
    busy.release(); // within its reserve again, busy takes the next freed slot
    await borrower;
    expect(order).toEqual(["newcomer", "busy"]);
  });

  it("a closed share's reserve goes back to the others; tryAcquire never waits", () => {
    const slots = new DeliverySlots(4);
    const [a, b] = [slots.share(100), slots.share(100)];
    expect(b.tryAcquire()).toBe(true);
    b.release();
    expect(fill(a)).toBe(2);
    b.close();
    expect(fill(a)).toBe(2);
    expect(a.inUse).toBe(4);
  });

  it("closing a share wakes the destinations waiting for its reserve", async () => {
    const slots = new DeliverySlots(4);
    const [a, b] = [slots.share(100), slots.share(100)];
    expect(b.tryAcquire()).toBe(true);
    b.release();
    expect(fill(a)).toBe(2);
    let woken = false;
    const waiting = a.acquire().then(() => (woken = true));
    await Promise.resolve();
    expect(woken).toBe(false);
    b.close(); // b removed: its reserve is a's to take, at once
    await waiting;
    expect(a.inUse).toBe(3);
  });

  it("refuses a bound that is not a positive integer", () => {
    expect(() => new DeliverySlots(0)).toThrow(RangeError);
    expect(() => new DeliverySlots(3).share(0)).toThrow(RangeError);
  });

  it("gives a freed spare slot to the destination with the fewest in use, not to whoever waited first (found by a review: a slow destination held the spare slots and cut a fast one's throughput 15 times)", async () => {
    const slots = new DeliverySlots(20);
    const [fast, slow] = [slots.share(100), slots.share(100)];
    slots.share(100); // two idle destinations: a lane of 5 stays free for them
    slots.share(100);
    slow.tryAcquire();
    fast.tryAcquire(); // both active: 5 slots reserved for each
    expect(fill(slow)).toBe(9); // its reserve and the spare: 10 in use
    expect(fill(fast)).toBe(4); // its reserve: 5 in use
    const given: string[] = [];
    void slow.acquire().then(() => given.push("slow"));
    void fast.acquire().then(() => given.push("fast"));
    slow.release(); // one of the slow destination's borrowed slots ends
    await Promise.resolve();
    expect(given).toEqual(["fast"]);
    expect([fast.inUse, slow.inUse]).toEqual([6, 9]);
    fast.release();
    await Promise.resolve();
    expect(given).toEqual(["fast", "slow"]); // then it may have one again
  });
});
