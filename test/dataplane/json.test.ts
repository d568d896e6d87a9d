// parseJson keeps the numbers a double cannot hold as written, so what is stored and delivered
// is what the SDK sent; everything else parses as JSON.parse does. Pure logic.
import { describe, expect, it } from "vitest";
import { isRawJSON, mayHoldInexactNumbers, parseJson, rawNumberText, readJson } from "../../dataplane/json.ts";

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

describe("parseJson and V8's escaped-key bug (nodejs/node#63785)", () => {
  // Each case: a poison (a key holding a backslash), then a same-shaped object whose escaped key
  // V8 reads as the poison's. Small-integer values: a heap number changes the shape, and V8 then
  // reads the key right anyway.
  const cases = [
    [String.raw`{"tier":1,"\\":1}`, String.raw`{"tier":2,"\u00e9":2}`, ["tier", "é"]],
    [String.raw`{"h":[],"\\":0}`, String.raw`{"h":1,"\"":2}`, ["h", '"']],
  ] as const;
  const keysOf = (value: unknown) => Object.keys(value as object);

  it("reads an escaped key as written after another text had a backslash key (regression: one tenant's request renamed fields in another's messages)", () => {
    for (const [poison, victim, keys] of cases) {
      JSON.parse(poison);
      // The bug itself, so that this test says so when a Node upgrade fixes it (parseJson's re-read can go then).
      expect(keysOf(JSON.parse(victim)), `V8 misreads ${victim} (nodejs/node#63785)`).not.toEqual(keys);
      JSON.parse(poison);
      expect(keysOf(parseJson(victim))).toEqual(keys);
    }
  });

  it("also without keeping numbers as written (the reader of stored messages)", () => {
    for (const [poison, victim, keys] of cases) {
      JSON.parse(poison);
      expect(keysOf(parseJson(victim, { exactNumbers: false }))).toEqual(keys);
    }
  });

  it("reads keys that really hold a backslash as written", () => {
    expect(parseJson(String.raw`{"a\\b":{"\\":[1,{"\\\\":true}]}}`)).toEqual({ "a\\b": { "\\": [1, { "\\\\": true }] } });
  });
});

describe("readJson (the reader for texts JSON.parse may get wrong)", () => {
  const same = (text: string) => expect(JSON.stringify(readJson(text, false))).toBe(JSON.stringify(JSON.parse(text)));

  it("reads what JSON.parse reads, to the same values", () => {
    for (const text of [
      '{"a":1,"b":[true,false,null,"x",-0.5e-3,{}],"c":{"d":[]}}',
      ' \t\n{ "a" : [ 1 , 2 ] , "b" : { } } \r\n',
      '"just a string"', "42", "null", "[]",
      String.raw`{"\u00e9\ud83d\ude00\ud800":"\"\\\/\b\f\n\r\t"}`,
      '{"a":1,"b":2,"a":3}',
    ]) same(text);
  });

  it("makes __proto__ an own property, as JSON.parse does, never the prototype", () => {
    const value = readJson('{"__proto__":{"polluted":true},"a":1}') as Record<string, unknown>;
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(Object.hasOwn(value, "__proto__")).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(JSON.stringify(value)).toBe('{"__proto__":{"polluted":true},"a":1}');
  });

  it("keeps numbers a double cannot hold as written", () => {
    expect(JSON.stringify(readJson('{"id":12345678901234567890,"big":1e400,"tiny":1e-400,"n":1.5}'))).toBe('{"id":12345678901234567890,"big":1e400,"tiny":1e-400,"n":1.5}');
  });

  it("reads nesting deeper than the stack", () => {
    const depth = 200_000;
    const value = readJson(`${"[".repeat(depth)}1${"]".repeat(depth)}`);
    let inner: unknown = value;
    for (let i = 0; i < depth; i++) inner = (inner as unknown[])[0];
    expect(inner).toBe(1);
  });

  it("throws a SyntaxError for invalid JSON, as JSON.parse does", () => {
    for (const text of ["", "{", '{"a":}', '{"a":1,}', "[1,]", "[1 2]", '{"a" 1}', "tru", "01", "1.", String.raw`"\x"`, '"a', '"tab\there"', "{} {}", "NaN"]) {
      expect(() => readJson(text), text).toThrow(SyntaxError);
      expect(() => JSON.parse(text), text).toThrow(SyntaxError);
    }
  });
});

describe("parseJson with deep nesting and long numbers", () => {
  it("reads valid JSON nested deeper than a reviver can go (regression: 400 invalid_json for the whole batch)", () => {
    const deep = `${"[".repeat(5_000)}${"]".repeat(5_000)}`;
    const value = parseJson(`{"id":12345678901234567890,"x":${deep}}`) as Record<string, unknown>;
    expect(rawNumberText(value.id)).toBe("12345678901234567890");
  });
});
