// Fields the ingest adds or normalises: messageId, receivedAt, sentAt, originalTimestamp,
// clock-skew-corrected timestamp, batch-level context/integrations merged into items (the item
// wins), context.ip for direct calls (behind trusted proxies), and context.library by default.
import { describe, expect, it } from "vitest";
import type { StoredMessage } from "../../schema/mod.ts";
import { WRITE_KEY, basic, post, storedMessages, uniqueId, useIngest } from "../harness/ingest.ts";

const env = useIngest({ ingest: { trustedProxies: ["127.0.0.1"] } });

const auth = { authorization: basic(WRITE_KEY) };

async function sendAndRead(path: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<StoredMessage[]> {
  const before = Date.now();
  const res = await post(`${env.ingest.url}${path}`, body, { headers: { ...auth, ...headers } });
  expect(res.status).toBe(200);
  const ids = new Set(((body.batch as Array<{ messageId?: string }>) ?? [body]).map((m) => m.messageId));
  const found = (await storedMessages(env.nats)).map((m) => m.body).filter((m) => ids.has(m.messageId));
  for (const m of found) expect(Date.parse(m.receivedAt)).toBeGreaterThanOrEqual(before - 5);
  return found;
}

describe("timestamps", () => {
  it("corrects the client's clock skew: timestamp = receivedAt - (sentAt - originalTimestamp)", async () => {
    // The client's clock is one hour ahead: it says it sent the message an hour from now.
    const skew = 3_600_000;
    const now = Date.now();
    const [m] = await sendAndRead("/v1/track", {
      userId: "u1", event: "Skewed", messageId: uniqueId(),
      timestamp: new Date(now + skew - 2000).toISOString(), // happened 2s before it was sent
      sentAt: new Date(now + skew).toISOString(),
    });
    const corrected = Date.parse(m!.timestamp);
    expect(corrected).toBe(Date.parse(m!.receivedAt) - 2000);
    expect(m!.originalTimestamp).toBe(new Date(now + skew - 2000).toISOString());
  });

  it("takes sentAt from the batch when items have none", async () => {
    const receivedish = Date.now();
    const [m] = await sendAndRead("/v1/batch", {
      sentAt: new Date(receivedish - 10_000).toISOString(),
      batch: [{ type: "track", userId: "u1", event: "Batched", messageId: uniqueId(), timestamp: new Date(receivedish - 15_000).toISOString() }],
    });
    expect(m!.sentAt).toBe(new Date(receivedish - 10_000).toISOString());
    expect(Date.parse(m!.timestamp)).toBe(Date.parse(m!.receivedAt) - 5000);
  });

  it("takes no clock skew from a sentAt without an offset beside a timestamp with one (regression: analytics_flutter's local-time sentAt shifted every event by the device's UTC offset)", async () => {
    // A device at UTC+2 with a right clock: the event 10 s ago in UTC, sentAt now in local time, no offset.
    const now = Date.now();
    const happened = new Date(now - 10_000).toISOString();
    const localSentAt = new Date(now + 2 * 3_600_000).toISOString().slice(0, -1);
    const [m] = await sendAndRead("/v1/b", { batch: [{ type: "track", userId: "u1", event: "Flutter", messageId: uniqueId(), timestamp: happened }], sentAt: localSentAt, writeKey: WRITE_KEY });
    expect(m!.timestamp).toBe(happened);
    // Both without an offset: one clock, whose skew is corrected as for any other.
    const [both] = await sendAndRead("/v1/track", { userId: "u1", event: "Local", messageId: uniqueId(), timestamp: "2020-02-03T10:00:00.000", sentAt: "2020-02-03T10:00:01.250" });
    expect(Date.parse(both!.timestamp)).toBe(Date.parse(both!.receivedAt) - 1250);
  });

  it("a date that cannot be read gives way to the other one: an item's sentAt to the batch's, originalTimestamp to timestamp (found by a time review)", async () => {
    const now = Date.now();
    const [m] = await sendAndRead("/v1/batch", {
      sentAt: new Date(now - 10_000).toISOString(),
      batch: [{ type: "track", userId: "u1", event: "Odd", messageId: uniqueId(), sentAt: "yesterday", timestamp: new Date(now - 15_000).toISOString() }],
    });
    expect(m!.sentAt).toBe(new Date(now - 10_000).toISOString());
    expect(Date.parse(m!.timestamp)).toBe(Date.parse(m!.receivedAt) - 5000);
    // Go's time.Time.String() form is no ISO date: the message's timestamp is used, not receivedAt.
    const [go] = await sendAndRead("/v1/track", { userId: "u1", event: "Go", messageId: uniqueId(), originalTimestamp: "2020-05-09 23:54:49.209808489 +0000 UTC m=+0.1", timestamp: "2020-05-09T23:54:49.209Z" });
    expect(go!.timestamp).toBe("2020-05-09T23:54:49.209Z");
    expect(go!.originalTimestamp).toBe("2020-05-09T23:54:49.209Z");
  });

  it("keeps the time as sent when an absurd sentAt would correct it out of RFC 3339's years (found by a time review: \"-005947-10-16T…\" was stored)", async () => {
    for (const sentAt of ["9999-12-31T23:59:59Z", "9999-01-01T00:00:00+05:00"]) {
      const [m] = await sendAndRead("/v1/track", { userId: "u1", event: "Absurd", messageId: uniqueId(), timestamp: "2026-11-23T19:00:00.000Z", sentAt });
      expect(m!.timestamp).toBe("2026-11-23T19:00:00.000Z");
    }
    // A time whose offset takes it out of those years is no date (found by a diff review: "-000001-12-31T19:00:00.000Z").
    const [edge] = await sendAndRead("/v1/track", { userId: "u1", event: "Edge", messageId: uniqueId(), timestamp: "0000-01-01T00:00:00+05:00", sentAt: "9999-12-31T23:00:00-05:00" });
    expect([edge!.timestamp, edge!.originalTimestamp]).toEqual([edge!.receivedAt, edge!.receivedAt]);
    expect(edge!.sentAt).toBe("9999-12-31T23:00:00-05:00"); // kept as sent, as any sentAt that is no date
    // A large but writable correction is still made (a device clock decades off).
    const [far] = await sendAndRead("/v1/track", { userId: "u1", event: "Far", messageId: uniqueId(), timestamp: "2099-01-01T00:00:00.000Z", sentAt: "2099-01-01T00:00:01.000Z" });
    expect(Date.parse(far!.timestamp)).toBe(Date.parse(far!.receivedAt) - 1000);
  });

  it("keeps the message's own timestamp when there is no sentAt (historical import)", async () => {
    const [m] = await sendAndRead("/v1/track", { userId: "u1", event: "Old", messageId: uniqueId(), timestamp: "2020-02-03T04:05:06.000Z" });
    expect(m!.timestamp).toBe("2020-02-03T04:05:06.000Z");
    expect(m!.originalTimestamp).toBe("2020-02-03T04:05:06.000Z");
    expect(m).not.toHaveProperty("sentAt");
  });

  it("writes sentAt and originalTimestamp in UTC with milliseconds, whatever offset and precision the SDK used", async () => {
    // analytics-go sends local time with nanoseconds, analytics-python "+00:00" with microseconds.
    const [m] = await sendAndRead("/v1/batch", {
      sentAt: "2020-02-03T09:35:07.123456789+05:30",
      batch: [
        { type: "track", userId: "u1", event: "Go", messageId: uniqueId(), timestamp: "2020-02-03T09:35:06.5+05:30" },
      ],
    });
    expect(m!.sentAt).toBe("2020-02-03T04:05:07.123Z");
    expect(m!.originalTimestamp).toBe("2020-02-03T04:05:06.500Z");
    expect(Date.parse(m!.timestamp)).toBe(Date.parse(m!.receivedAt) - 623);
    const [day] = await sendAndRead("/v1/track", { userId: "u1", event: "Import", messageId: uniqueId(), timestamp: "2020-02-03" });
    expect(day!.originalTimestamp).toBe("2020-02-03T00:00:00.000Z");
    expect(day!.timestamp).toBe("2020-02-03T00:00:00.000Z");
  });

  it("reads only ISO-8601 as a date: a time without an offset is UTC wherever the ingest runs, and \"1\" is no date", async () => {
    const tz = process.env.TZ;
    process.env.TZ = "America/New_York"; // the ingest runs in this process: a laptop's zone
    try {
      const [local] = await sendAndRead("/v1/track", { userId: "u1", event: "No offset", messageId: uniqueId(), timestamp: "2020-02-03T10:00:00" });
      expect(local!.originalTimestamp).toBe("2020-02-03T10:00:00.000Z");
      const [short] = await sendAndRead("/v1/track", { userId: "u1", event: "Hour offset", messageId: uniqueId(), timestamp: "2020-02-03 10:00:00,25+05" });
      expect(short!.originalTimestamp).toBe("2020-02-03T05:00:00.250Z");
    } finally {
      if (tz === undefined) delete process.env.TZ;
      else process.env.TZ = tz;
    }
    // V8's Date.parse reads "1" as 2001-01-01 and "Tuesday 5" as a May date.
    const [loose] = await sendAndRead("/v1/track", { userId: "u1", event: "Loose", messageId: uniqueId(), timestamp: "1", sentAt: "Tuesday 5" });
    expect(loose!.originalTimestamp).toBe(loose!.receivedAt);
    expect(loose!.timestamp).toBe(loose!.receivedAt);
    expect(loose!.sentAt).toBe("Tuesday 5"); // kept as sent: it is text, just not a date
  });

  it("takes no impossible calendar date for a date (Date.parse rolls 2026-02-30 over to March 2nd)", async () => {
    for (const timestamp of ["2026-02-29T12:00:00Z", "2026-02-30T12:00:00Z", "2026-04-31", "2026-13-01T00:00:00Z"]) {
      const [m] = await sendAndRead("/v1/track", { userId: "u1", event: "Impossible", messageId: uniqueId(), timestamp });
      expect(m!.originalTimestamp, timestamp).toBe(m!.receivedAt);
    }
    const [leap] = await sendAndRead("/v1/track", { userId: "u1", event: "Leap day", messageId: uniqueId(), timestamp: "2028-02-29T12:00:00Z" });
    expect(leap!.originalTimestamp).toBe("2028-02-29T12:00:00.000Z");
    const [endOfMonth] = await sendAndRead("/v1/track", { userId: "u1", event: "31st", messageId: uniqueId(), timestamp: "2026-12-31T23:59:59.999+00:00" });
    expect(endOfMonth!.originalTimestamp).toBe("2026-12-31T23:59:59.999Z");
  });

  it("uses receivedAt when the message has no time at all", async () => {
    const [m] = await sendAndRead("/v1/track", { userId: "u1", event: "Now", messageId: uniqueId() });
    expect(m!.timestamp).toBe(m!.receivedAt);
    expect(m!.originalTimestamp).toBe(m!.receivedAt);
  });
});

describe("batch merge rules", () => {
  it("merges batch-level context and integrations into each item; the item's keys win", async () => {
    const [a, b] = await sendAndRead("/v1/batch", {
      context: { locale: "en-US", app: { name: "shop" }, library: { name: "analytics-go", version: "3.3.0" } },
      integrations: { All: false, Webhooks: true },
      batch: [
        { type: "track", userId: "u1", event: "A", messageId: uniqueId("a") },
        { type: "track", userId: "u1", event: "B", messageId: uniqueId("b"), context: { locale: "de-DE" }, integrations: { Webhooks: false } },
      ],
    });
    expect(a!.context).toMatchObject({ locale: "en-US", app: { name: "shop" }, library: { name: "analytics-go", version: "3.3.0" } });
    expect(a!.integrations).toEqual({ All: false, Webhooks: true });
    expect(b!.context).toMatchObject({ locale: "de-DE", app: { name: "shop" } });
    expect(b!.integrations).toEqual({ All: false, Webhooks: false });
  });
});

describe("empty arrays in map fields", () => {
  it("reads [] in context, integrations, properties and traits as {} (regression: analytics-php's json_encode writes an empty map so, and the message was not accepted)", async () => {
    const [track, identify] = await sendAndRead("/v1/batch", {
      integrations: [],
      context: [],
      batch: [
        { type: "track", userId: "u1", event: "PHP", messageId: uniqueId("php-track"), properties: [], integrations: [], context: [] },
        { type: "identify", userId: "u1", messageId: uniqueId("php-identify"), traits: [] },
      ],
    });
    expect(track).toMatchObject({ properties: {}, integrations: {}, context: { library: { name: "unknown" } } });
    expect(identify).toMatchObject({ traits: {} });
    // Only an empty one: an array with items is no map.
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u1", event: "E", messageId: uniqueId(), properties: [1] }, { headers: auth });
    expect(res.status).toBe(200);
  });
});

describe("generated and defaulted fields", () => {
  it("assigns a messageId when the message has none", async () => {
    const marker = uniqueId("no-id");
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u1", event: marker }, { headers: auth });
    expect(res.status).toBe(200);
    const m = (await storedMessages(env.nats)).find((s) => (s.body as { event?: string }).event === marker);
    expect(m?.body.messageId).toMatch(/^th-[0-9a-f-]{36}$/);
    expect(m?.msgId).toBe(`default/web/${m?.body.messageId}`);
  });

  it("defaults context.library to unknown", async () => {
    const [m] = await sendAndRead("/v1/identify", { userId: "u1", messageId: uniqueId() });
    expect(m!.context.library).toEqual({ name: "unknown", version: "unknown" });
    // A library without a name keeps what it has (found by a fidelity review: its version was lost).
    const [versioned] = await sendAndRead("/v1/identify", { userId: "u1", messageId: uniqueId(), context: { library: { version: "1.2.3", extra: "x" } } });
    expect(versioned!.context.library).toEqual({ version: "1.2.3", extra: "x", name: "unknown" });
  });

  it("sets context.ip from the request when context.direct is true, through a trusted proxy", async () => {
    const [direct] = await sendAndRead("/v1/track", { userId: "u1", event: "Direct", messageId: uniqueId(), context: { direct: true } }, { "x-forwarded-for": "203.0.113.7" });
    expect(direct!.context.ip).toBe("203.0.113.7");
    const [indirect] = await sendAndRead("/v1/track", { userId: "u1", event: "Server", messageId: uniqueId() }, { "x-forwarded-for": "203.0.113.7" });
    expect(indirect!.context).not.toHaveProperty("ip");
  });

  it("believes X-Forwarded-For only as far as the trusted proxies: an address the client put before them is not its IP (found by a mutation audit: trusting any proxy passed every test)", async () => {
    const [m] = await sendAndRead("/v1/track", { userId: "u1", event: "Spoofed", messageId: uniqueId(), context: { direct: true } }, { "x-forwarded-for": "1.2.3.4, 203.0.113.7" });
    expect(m!.context.ip).toBe("203.0.113.7");
    // What a trusted proxy passed on that is no address is not stored as one (found by a review).
    const [garbled] = await sendAndRead("/v1/track", { userId: "u1", event: "Garbled", messageId: uniqueId(), context: { direct: true } }, { "x-forwarded-for": "garbage" });
    expect(garbled!.context).not.toHaveProperty("ip");
  });

  it("takes the address of a trusted proxy's X-Forwarded-For entry that carries a port (found by a proxy review: Azure Application Gateway writes 203.0.113.7:51234, and no context.ip was set)", async () => {
    for (const [entry, ip] of [["203.0.113.7:51234", "203.0.113.7"], ["[2001:db8::1]:443", "2001:db8::1"], ["[::ffff:203.0.113.8]:443", "203.0.113.8"], ["1.2.3.4, 198.51.100.2:8080", "198.51.100.2"]] as const) {
      const messageId = uniqueId();
      const res = await env.ingest.app.inject({
        method: "POST", url: "/v1/track", remoteAddress: "127.0.0.1",
        headers: { ...auth, "content-type": "application/json", "x-forwarded-for": entry },
        payload: { userId: "u1", event: "Behind a gateway", messageId, context: { direct: true } },
      });
      expect(res.statusCode).toBe(200);
      const stored = (await storedMessages(env.nats)).map((m) => m.body).find((m) => m.messageId === messageId);
      expect(stored!.context.ip, entry).toBe(ip);
    }
    // Not an address with a port: still none.
    const [garbled] = await sendAndRead("/v1/track", { userId: "u1", event: "Garbled", messageId: uniqueId(), context: { direct: true } }, { "x-forwarded-for": "[203.0.113.7]:443" });
    expect(garbled!.context).not.toHaveProperty("ip");
  });

  it("sets context.ip for events from a browser or a mobile app, as Segment does for client-side events, but not for a server's", async () => {
    const forwarded = { "x-forwarded-for": "203.0.113.9" };
    const [browser] = await sendAndRead("/v1/t", { userId: "u1", event: "Web", messageId: uniqueId(), context: { library: { name: "analytics.js", version: "next-1.84.3" } } }, forwarded);
    expect(browser!.context.ip).toBe("203.0.113.9");
    const [ios] = await sendAndRead("/v1/track", { userId: "u1", event: "iOS", messageId: uniqueId(), context: { library: { name: "analytics-swift", version: "1.5.0" } } }, forwarded);
    expect(ios!.context.ip).toBe("203.0.113.9");
    const [android] = await sendAndRead("/v1/track", { userId: "u1", event: "Android", messageId: uniqueId(), context: { library: { name: "analytics-kotlin", version: "1.27.0" }, device: { model: "Pixel 9" } } }, forwarded);
    expect(android!.context.ip).toBe("203.0.113.9");
    for (const library of [{ name: "analytics-kotlin", version: "1.27.0" }, { name: "analytics-python", version: "2.4.0" }, { name: "@segment/analytics-node", version: "3.1.0" }]) {
      const [server] = await sendAndRead("/v1/track", { userId: "u1", event: "Server", messageId: uniqueId(), context: { library } }, forwarded);
      expect(server!.context, library.name).not.toHaveProperty("ip");
    }
  });

  it("keeps a context.ip the caller set", async () => {
    const [m] = await sendAndRead("/v1/track", { userId: "u1", event: "Given", messageId: uniqueId(), context: { direct: true, ip: "198.51.100.1" } });
    expect(m!.context.ip).toBe("198.51.100.1");
  });

  it("stores numbers a double cannot hold exactly as sent, and such an id as its digits (regression: 12345678901234567890 became ...7000)", async () => {
    const messageId = uniqueId();
    const raw = `{"userId":12345678901234567890,"event":"Big","messageId":"${messageId}","properties":{"orderId":9223372036854775807,"huge":1e400,"price":19.99}}`;
    const res = await post(`${env.ingest.url}/v1/track`, undefined, { headers: auth, raw });
    expect(res.status).toBe(200);
    const stored = (await storedMessages(env.nats)).find((m) => m.body.messageId === messageId);
    expect(stored!.body.userId).toBe("12345678901234567890");
    const bytes = (await env.nats.jsm.streams.getMessage("TRACKHOOK_EVENTS", { last_by_subj: "trackhook.events.default.web.track" }))?.string();
    expect(bytes).toContain('"properties":{"orderId":9223372036854775807,"huge":1e400,"price":19.99}');
  });

  it("stores numeric ids as strings and never stores the write key", async () => {
    const [m] = await sendAndRead("/v1/group", { userId: 42, groupId: 7, messageId: uniqueId(), writeKey: WRITE_KEY });
    expect(m).toMatchObject({ userId: "42", groupId: "7" });
    expect(m).not.toHaveProperty("writeKey");
  });
});
