// parseJson keeps the numbers a double cannot hold as written, so what is stored and delivered
// is what the SDK sent; everything else parses as JSON.parse does. Pure logic.
import { describe, expect, it } from "vitest";
import { isRawJSON, mayHoldInexactNumbers, parseJson, rawNumberText } from "../../dataplane/json.ts";

const roundTrip = (text: string) => JSON.stringify(parseJson(text));

describe("parseJson", () => {
  it("keeps 64-bit integers, overflowing and underflowing exponents and long fractions as written (regression: rounded, or null)", () => {
    const text = '{"orderId":12345678901234567890,"negative":-9223372036854775807,"big":1e400,"tiny":1e-400,"long":0.1000000000000000055511}';
    expect(roundTrip(text)).toBe(text);
  });

  it("leaves numbers a double holds exactly as numbers, and text that only looks long alone", () => {
    const value = parseJson('{"safe":9007199254740991,"pi":3.141592653589793,"n":42,"id":"12345678901234567890","at":"2026-11-22T10:00:00.123456789Z"}') as Record<string, unknown>;
    expect(value).toEqual({ safe: 9007199254740991, pi: 3.141592653589793, n: 42, id: "12345678901234567890", at: "2026-11-22T10:00:00.123456789Z" });
  });

  it("a 16-digit integer above 2^53 is kept; one below it is a number", () => {
    const value = parseJson('{"over":9007199254740993,"under":1234567890123456}') as Record<string, unknown>;
    expect(isRawJSON(value.over)).toBe(true);
    expect(value.under).toBe(1234567890123456);
  });

  it("rawNumberText gives a kept number's text, and anything else unchanged", () => {
    const value = parseJson('{"userId":12345678901234567890}') as Record<string, unknown>;
    expect(rawNumberText(value.userId)).toBe("12345678901234567890");
    expect(rawNumberText(42)).toBe(42);
    expect(rawNumberText("u1")).toBe("u1");
  });

  it("takes the reviver's slow path only for a JSON number that may need it, not for ids that look like one (regression: hex ids sent every browser message down it)", () => {
    const text = '{"messageId":"ajs-next-1732280000000-4e123f9a","anonymousId":"5e100c2b-9d1e-4f3a-8e21-1234567890123456","properties":{"path":"/article-1234e567","n":12}}';
    expect(mayHoldInexactNumbers(text)).toBe(false);
    expect(parseJson(text)).toEqual(JSON.parse(text));
    for (const big of ['{"a":12345678901234567890}', '{"a": -1e400}', '[1,2e-999]', '{"a":1234567.890123456}']) expect(mayHoldInexactNumbers(big), big).toBe(true);
    expect(roundTrip('{"orderId": 1.23456789012345678e5, "list":[1,-9223372036854775807]}')).toBe('{"orderId":1.23456789012345678e5,"list":[1,-9223372036854775807]}');
  });

  it("throws on invalid JSON as JSON.parse does, with or without long numbers", () => {
    expect(() => parseJson("{")).toThrow(SyntaxError);
    expect(() => parseJson('{"a":12345678901234567890')).toThrow(SyntaxError);
  });
});
