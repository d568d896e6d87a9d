// The ingest's own Nats-Msg-Id header block against a real nats-server: stored and deduplicated as
// through nats.js's headers(), so a nats.js upgrade that stops calling only encode() on a publish's
// headers fails here.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StorageType } from "@nats-io/jetstream";
import { InvalidMsgIdError, msgIdHeader } from "../../dataplane/nats/mod.ts";
import { randomName, startNats, type NatsHarness } from "../harness/nats.ts";

let nats: NatsHarness;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats?.stop();
});

describe("msgIdHeader", () => {
  it("stores the exact id as Nats-Msg-Id, unicode and spaces included, and deduplicates on it", async () => {
    const name = randomName("WIRE");
    const subject = `${name.toLowerCase()}.events.track`;
    await nats.jsm.streams.add({ name, subjects: [`${name.toLowerCase()}.events.>`], storage: StorageType.File, duplicate_window: 60_000_000_000 });
    const publish = async (id: string, payload: string) =>
      (await nats.nc.request(subject, payload, { headers: msgIdHeader(id), timeout: 5000 })).json<{ stream: string; seq: number; duplicate?: boolean }>();

    const id = "default/web/ñandú 🐦 ";
    expect(await publish(id, '{"n":1}')).toEqual({ stream: name, seq: 1 });
    const stored = (await nats.jsm.streams.getMessage(name, { seq: 1 }))!;
    expect(stored.header.get("Nats-Msg-Id")).toBe(id.trimEnd()); // nats.js trims what it reads
    expect(stored.string()).toBe('{"n":1}');

    expect(await publish(id, '{"n":2}')).toEqual({ stream: name, seq: 1, duplicate: true });
    // Deduplication keys on the exact id: without its trailing space it is another message.
    // (nats.js's headers() trimmed values, so such ids used to be deduplicated together.)
    expect(await publish(id.trimEnd(), '{"n":3}')).toEqual({ stream: name, seq: 2 });
    expect((await nats.jsm.streams.info(name)).state.messages).toBe(2);
  });

  it("refuses an id with a line break, which would end the header block", () => {
    expect(() => msgIdHeader("default/web/a\r\nNats-Expected-Stream: X")).toThrow(InvalidMsgIdError);
    expect(() => msgIdHeader("default/web/a\nb")).toThrow(/cannot contain/);
  });
});
