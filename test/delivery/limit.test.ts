// The process-wide bound on deliveries in flight.
import { describe, expect, it } from "vitest";
import { ConcurrencyLimit } from "../../dataplane/delivery/limit.ts";

describe("ConcurrencyLimit", () => {
  it("never lets more than max run at once, and runs everything in the end, in order of arrival", async () => {
    const limit = new ConcurrencyLimit(3);
    let running = 0;
    let peak = 0;
    const order: number[] = [];
    await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        await limit.acquire();
        order.push(i);
        running++;
        peak = Math.max(peak, running);
        await new Promise((r) => setTimeout(r, 5));
        running--;
        limit.release();
      }),
    );
    expect(peak).toBe(3);
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(limit.inUse).toBe(0);
  });

  it("tryAcquire takes a free slot at once and refuses when none is free; a released slot goes to a waiter first", async () => {
    const limit = new ConcurrencyLimit(1);
    expect(limit.tryAcquire()).toBe(true);
    expect(limit.tryAcquire()).toBe(false);
    let waiterRan = false;
    const waiter = limit.acquire().then(() => (waiterRan = true));
    limit.release();
    await waiter;
    expect(waiterRan).toBe(true);
    expect(limit.tryAcquire()).toBe(false); // the waiter holds it now
    limit.release();
    expect(limit.inUse).toBe(0);
    expect(limit.tryAcquire()).toBe(true);
  });

  it("refuses a bound that is not a positive integer", () => {
    expect(() => new ConcurrencyLimit(0)).toThrow(RangeError);
  });
});
