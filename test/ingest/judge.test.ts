// What the "message not accepted" log line says about a message: the reason, and a detail a
// developer reading the dev log understands without knowing the schema. Pure logic: no server.
import { describe, expect, it } from "vitest";
import { judge } from "../../dataplane/ingest/accept.ts";

describe("judge(): reasons and their details", () => {
  it.each([
    [{ event: "Signed Up" }, "track", "no_user_anon_id", "neither userId nor anonymousId is set"],
    [{ userId: "u1" }, "track", "missing_event", "a track needs an event name"],
    [{ userId: "u1" }, "group", "missing_group_id", "a group call needs a groupId"],
    [{ userId: "u1" }, "alias", "missing_previous_id", "an alias needs a previousId"],
    [{ previousId: "a1", anonymousId: "a2" }, "alias", "missing_user_id", "an alias needs a userId"],
  ] as const)("%j as %s: %s", (message, type, reason, detail) => {
    expect(judge({ ...message }, type)).toEqual({ accepted: false, reason, detail });
  });

  it("names the field when one is wrong, in a message's words", () => {
    const verdict = judge({ userId: "u1", event: { name: "not text" } }, "track");
    expect(verdict).toMatchObject({ accepted: false, reason: "invalid_field" });
    const detail = (verdict as { detail: string }).detail;
    expect(detail).toMatch(/^event: must be string/);
    expect(detail).not.toContain("(document)");
    expect(detail).not.toContain("anyOf");
  });

  it("takes a messageId of any printable text, astral characters (a surrogate pair) included", () => {
    expect(judge({ userId: "u1", messageId: "emoji-😀-é" }, "identify")).toMatchObject({ accepted: true });
  });

  it("takes ids and event names of any length: the 32KB message limit is the only bound (no undocumented 1,024)", () => {
    expect(judge({ userId: "u".repeat(5000), event: "e".repeat(5000) }, "track")).toMatchObject({ accepted: true });
    expect(judge({ userId: "u1", groupId: "g".repeat(2000) }, "group")).toMatchObject({ accepted: true });
  });

  it.each([
    [{ userId: "u1", event: "E", properties: [1, 2] }, "track", /^properties: must be object/],
    [{ userId: "u1", name: 5 }, "page", /^name: must be string/],
    [{ userId: "u1", event: "E", integrations: { Mixpanel: "false" } }, "track", /^integrations\.Mixpanel: must be boolean/],
    [{ userId: "u1", messageId: "m".repeat(101) }, "identify", /^messageId: must NOT have more than 100 characters/],
    [{ userId: "u1", messageId: "lone-\udc00" }, "identify", /^messageId: /],
  ] as const)("does not accept a field of the wrong type (ADR 2): %j as %s", (message, type, detail) => {
    const verdict = judge({ ...message }, type);
    expect(verdict).toMatchObject({ accepted: false, reason: "invalid_field" });
    expect((verdict as { detail: string }).detail).toMatch(detail);
  });
});
