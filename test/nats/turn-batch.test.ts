// TurnBatch: one turn's work runs together, and work that throws does not stop the rest.
import { describe, expect, it } from "vitest";
import { TurnBatch } from "../../dataplane/nats/mod.ts";

describe("TurnBatch", () => {
  it("runs the work queued in one turn together, in order, after the turn", async () => {
    const batch = new TurnBatch();
    const ran: number[] = [];
    for (let i = 0; i < 3; i++) batch.add(() => ran.push(i));
    expect(ran).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(ran).toEqual([0, 1, 2]);
  });

  it("keeps running the rest when one piece of work throws, and reports the error", async () => {
    const errors: unknown[] = [];
    const batch = new TurnBatch((err) => errors.push(err));
    const ran: number[] = [];
    batch.add(() => ran.push(1));
    batch.add(() => {
      throw new Error("connection closed");
    });
    batch.add(() => ran.push(3));
    batch.flush();
    expect(ran).toEqual([1, 3]);
    expect(errors).toEqual([new Error("connection closed")]);
  });
});
