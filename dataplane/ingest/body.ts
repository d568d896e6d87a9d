// Reads a request body with its limit enforced on the decompressed bytes *while reading*, so a
// gzip bomb is stopped after `limit` bytes of output instead of being inflated in memory.
import type { IncomingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import { createGunzip, createInflate, type Gunzip, type Inflate } from "node:zlib";
import { errors, type IngestError } from "./errors.ts";

/** Messages nested deeper than this are not accepted: nothing in a Segment message needs it, and JSON.stringify would overflow the stack on it. */
export const MAX_JSON_DEPTH = 64;

export function readBoundedBody(raw: Readable, headers: IncomingHttpHeaders, limit: number, tooLarge: () => IngestError): Promise<Buffer> {
  const encoding = (headers["content-encoding"] ?? "identity").trim().toLowerCase();
  let decoder: Gunzip | Inflate | undefined;
  if (encoding === "gzip" || encoding === "x-gzip") decoder = createGunzip();
  else if (encoding === "deflate") decoder = createInflate();
  else if (encoding !== "identity") return Promise.reject(errors.unsupportedEncoding(encoding));

  // Compressed data can be a little larger than its output; anything past this margin cannot fit.
  // Compressed bytes are bounded too: gzip members that inflate to nothing cost no output.
  const wireLimit = decoder ? limit + 16 * 1024 : limit;
  if (Number(headers["content-length"]) > wireLimit) return Promise.reject(tooLarge());

  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let wireBytes = 0;
    let settled = false;

    // Stops reading without destroying the socket, so the 400 still reaches the client; the
    // error handler adds Connection: close because the rest of the body stays unread.
    const stop = (err: Error) => {
      if (settled) return;
      settled = true;
      raw.off("data", onWire);
      raw.pause();
      if (decoder) {
        raw.unpipe(decoder);
        decoder.destroy();
      }
      reject(err);
    };
    const onOutput = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) stop(tooLarge());
      else chunks.push(chunk);
    };
    const onWire = (chunk: Buffer) => {
      wireBytes += chunk.length;
      if (wireBytes > wireLimit) stop(tooLarge());
      else if (!decoder) onOutput(chunk);
    };
    const onEnd = () => {
      if (settled) return;
      settled = true;
      resolve(Buffer.concat(chunks, size));
    };

    let received = false;
    raw.on("data", onWire);
    raw.on("end", () => (received = true));
    raw.on("error", (err) => stop(errors.clientAborted(err)));
    // "close" also follows a complete body, before the decompressor has finished with it.
    raw.on("close", () => received || stop(errors.clientAborted()));
    if (decoder) {
      raw.pipe(decoder);
      decoder.on("data", onOutput);
      decoder.on("end", onEnd);
      decoder.on("error", (err) => stop(errors.invalidCompression(err)));
    } else {
      raw.on("end", onEnd);
    }
  });
}

/**
 * JSON.parse of a body (after a UTF-8 BOM, if any); the result must be a JSON object. Depth is not
 * limited here (JSON.parse does not recurse): the message routes refuse each message nested
 * deeper than MAX_JSON_DEPTH on its own, so one such item does not cost a batch its others.
 */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let text = body.toString("utf8");
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw errors.invalidJson(err);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw errors.invalidBody("Body must be a JSON object");
  return parsed as Record<string, unknown>;
}

const QUOTE = 0x22, BACKSLASH = 0x5c, OPEN_BRACE = 0x7b, OPEN_BRACKET = 0x5b, CLOSE_BRACE = 0x7d, CLOSE_BRACKET = 0x5d;

/** Whether JSON text nests objects/arrays deeper than `max`, ignoring brackets inside strings. */
export function jsonDepthExceeds(bytes: Buffer, max: number): boolean {
  // Fewer than `max` opening brackets cannot nest deeper than `max`; counting them with the native
  // indexOf is far cheaper than the byte loop below, which typical messages never reach.
  let opening = 0;
  for (const bracket of [OPEN_BRACE, OPEN_BRACKET]) {
    for (let at = bytes.indexOf(bracket); at !== -1 && opening <= max; at = bytes.indexOf(bracket, at + 1)) opening++;
  }
  if (opening <= max) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) inString = false;
    } else if (b === QUOTE) inString = true;
    else if (b === OPEN_BRACE || b === OPEN_BRACKET) {
      if (++depth > max) return true;
    } else if (b === CLOSE_BRACE || b === CLOSE_BRACKET) depth--;
  }
  return false;
}

/**
 * Whether a parsed JSON value nests objects/arrays deeper than `max` (the value itself, if an
 * object or array, is level 1, as in jsonDepthExceeds). Iterative: the value may be deeper than
 * the stack.
 */
export function nestedDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<{ value: object; depth: number }> = [];
  if (value !== null && typeof value === "object") stack.push({ value, depth: 1 });
  for (let top = stack.pop(); top; top = stack.pop()) {
    if (top.depth > max) return true;
    for (const child of Array.isArray(top.value) ? top.value : Object.values(top.value)) {
      if (child !== null && typeof child === "object") stack.push({ value: child as object, depth: top.depth + 1 });
    }
  }
  return false;
}
