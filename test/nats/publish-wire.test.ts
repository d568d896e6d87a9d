// The ingest's own Nats-Msg-Id header block against a real nats-server: stored and deduplicated as
// through nats.js's headers(), so a nats.js upgrade that stops calling only encode() on a publish's
// headers fails here.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StorageType } from "@nats-io/jetstream";
import { headers } from "@nats-io/transport-node";
import { InvalidMsgIdError, msgIdHeader } from "../../dataplane/nats/mod.ts";
import { randomName, startNats, type NatsHarness } from "../harness/nats.ts";

let nats: NatsHarness;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats?.stop();
});

/** A stream of its own, a publish through a header block, and the stored header bytes as sent. */
async function stream() {
  const name = randomName("WIRE");
  const subject = `${name.toLowerCase()}.events.track`;
  await nats.jsm.streams.add({ name, subjects: [`${name.toLowerCase()}.events.>`], storage: StorageType.File, duplicate_window: 60_000_000_000 });
  const publish = async (h: ReturnType<typeof headers>, payload: string) =>
    (await nats.nc.request(subject, payload, { headers: h, timeout: 5000 })).json<{ stream: string; seq: number; duplicate?: boolean }>();
  // The raw stored headers (the client's getMessage() parses and trims them).
  const storedHeader = async (seq: number) => {
    const reply = (await nats.nc.request(`$JS.API.STREAM.MSG.GET.${name}`, JSON.stringify({ seq }), { timeout: 5000 })).json<{ message: { hdrs: string } }>();
    return Buffer.from(reply.message.hdrs, "base64").toString("utf8");
  };
  return { name, publish, storedHeader };
}

describe("msgIdHeader", () => {
  it("stores the same header bytes as nats.js's headers(), unicode included, and deduplicates on them", async () => {
    const { name, publish, storedHeader } = await stream();
    const id = "default/web/ñandú 🐦";
    expect(await publish(msgIdHeader(id), '{"n":1}')).toEqual({ stream: name, seq: 1 });
    const viaNatsJs = headers();
    viaNatsJs.set("Nats-Msg-Id", "default/web/other");
    expect(await publish(viaNatsJs, '{"n":2}')).toEqual({ stream: name, seq: 2 });

    expect(await storedHeader(1)).toBe(`NATS/1.0\r\nNats-Msg-Id: ${id}\r\n\r\n`);
    expect((await storedHeader(2)).replace("other", "ñandú 🐦")).toBe(await storedHeader(1));
    expect((await nats.jsm.streams.getMessage(name, { seq: 1 }))!.string()).toBe('{"n":1}');

    expect(await publish(msgIdHeader(id), '{"n":3}')).toEqual({ stream: name, seq: 1, duplicate: true });
    // Trailing whitespace is trimmed, as nats.js did: deduplication is what it was.
    expect(await publish(msgIdHeader(`${id} \u00a0`), '{"n":4}')).toEqual({ stream: name, seq: 1, duplicate: true });
    expect(await publish(msgIdHeader(`${id}-2`), '{"n":5}')).toEqual({ stream: name, seq: 3 });
    expect((await nats.jsm.streams.info(name)).state.messages).toBe(3);
  });

  it("refuses an id with a line break, which would end the header block", () => {
    expect(() => msgIdHeader("default/web/a\r\nNats-Expected-Stream: X")).toThrow(InvalidMsgIdError);
    expect(() => msgIdHeader("default/web/a\nb")).toThrow(/cannot contain/);
  });
});
