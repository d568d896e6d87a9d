// Reads a request body with its limit enforced on the decompressed bytes *while reading*, so a
// gzip bomb is stopped after `limit` bytes of output instead of being inflated in memory.
import type { IncomingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import { createGunzip, createInflate, createInflateRaw, type Gunzip, type Inflate, type InflateRaw } from "node:zlib";
import { parseJson } from "../json.ts";
import { errors, type IngestError } from "./errors.ts";

/** Messages nested deeper than this are not accepted: nothing in a Segment message needs it, and JSON.stringify would overflow the stack on it. */
export const MAX_JSON_DEPTH = 64;

/**
 * How much of an over-size body is still read (and thrown away) after the 400. A client that is
 * still sending when the answer comes would otherwise have its connection reset under it, and
 * many (undici, fetch) then report a network error, which SDKs retry, instead of the 400, which
 * they do not. Past this, the connection is closed: the client is not a well-meaning SDK.
 */
export const DRAIN_LIMIT_BYTES = 8 * 1024 * 1024;

type Decoder = Gunzip | Inflate | InflateRaw;

/** Retry-After of a 503 `overloaded`: room is made as requests in flight are answered, within a second. */
const OVERLOADED_RETRY_AFTER_SECONDS = 1;

/**
 * Reads the body, decompressed, up to `limit` bytes. `take` is asked for room for each piece of
 * output as it comes (the process's BodyBudget); refused, the request is answered 503 `overloaded`.
 */
export function readBoundedBody(raw: Readable, headers: IncomingHttpHeaders, limit: number, tooLarge: () => IngestError, take?: (bytes: number) => boolean): Promise<Buffer> {
  // An empty header is no encoding (RFC 9110 lists codings; none listed means identity).
  const encoding = headers["content-encoding"]?.trim().toLowerCase() || "identity";
  if (encoding !== "identity" && encoding !== "gzip" && encoding !== "x-gzip" && encoding !== "deflate") {
    return Promise.reject(errors.unsupportedEncoding(encoding));
  }
  const compressed = encoding !== "identity";

  // Compressed data can be a little larger than its output; anything past this margin cannot fit.
  // Compressed bytes are bounded too: gzip members that inflate to nothing cost no output.
  const wireLimit = compressed ? limit + 16 * 1024 : limit;
  if (Number(headers["content-length"]) > wireLimit) {
    drain(raw, 0);
    return Promise.reject(tooLarge());
  }

  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let wireBytes = 0;
    let settled = false;
    let received = false;
    // Made on the first bytes, which tell a zlib stream from raw DEFLATE (below).
    let decoder: Decoder | undefined;

    const stop = (err: IngestError) => {
      if (settled) return;
      settled = true;
      raw.off("data", onWire);
      decoder?.destroy();
      // The rest of an over-size body is read and dropped, so that the 400 reaches the client;
      // after any other failure nothing more is wanted from this request.
      if (err.drainBody && !received) drain(raw, wireBytes);
      else raw.pause();
      reject(err);
    };
    const onOutput = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) stop(tooLarge());
      else if (take && !take(chunk.length)) stop(errors.overloaded(OVERLOADED_RETRY_AFTER_SECONDS));
      else chunks.push(chunk);
    };
    const onEnd = () => {
      if (settled) return;
      settled = true;
      resolve(Buffer.concat(chunks, size));
    };
    const startDecoder = (first: Buffer) => {
      decoder = encoding === "deflate" && !hasZlibHeader(first) ? createInflateRaw() : encoding === "deflate" ? createInflate() : createGunzip();
      decoder.on("data", onOutput);
      decoder.on("end", onEnd);
      decoder.on("error", (err) => stop(errors.invalidCompression(err)));
    };
    // The first two bytes tell the formats apart; a client may send them one at a time (found by
    // a fuzz review: a 1-byte first chunk of raw DEFLATE was read as zlib and refused).
    let head: Buffer | undefined;
    // Written to the decoder without backpressure: the compressed input is bounded by wireLimit.
    const onWire = (chunk: Buffer) => {
      wireBytes += chunk.length;
      if (wireBytes > wireLimit) stop(tooLarge());
      else if (!compressed) onOutput(chunk);
      else if (decoder) decoder.write(chunk);
      else {
        head = head ? Buffer.concat([head, chunk]) : chunk;
        if (head.length < 2) return;
        startDecoder(head);
        decoder!.write(head);
        head = undefined;
      }
    };

    raw.on("data", onWire);
    raw.on("end", () => {
      received = true;
      if (!compressed) return onEnd();
      if (!decoder && head) {
        startDecoder(head);
        decoder!.write(head);
      }
      if (!decoder) stop(errors.invalidCompression(new Error("empty compressed body")));
      else decoder.end();
    });
    raw.on("error", (err) => stop(errors.clientAborted(err)));
    // "close" also follows a complete body, before the decompressor has finished with it.
    raw.on("close", () => received || stop(errors.clientAborted()));
  });
}

/**
 * HTTP's "deflate" is the zlib format (RFC 9110), but some clients send raw DEFLATE under that
 * name. A zlib stream starts with a method byte of 8 and a check making the first two bytes a
 * multiple of 31; raw DEFLATE starting so is possible but, with the check, unlikely.
 */
function hasZlibHeader(first: Buffer): boolean {
  if (first.length < 2) return true; // too short to tell: the common format, which says so if wrong
  return (first[0]! & 0x0f) === 8 && ((first[0]! << 8) | first[1]!) % 31 === 0;
}

/** Reads and drops the rest of a request body, up to DRAIN_LIMIT_BYTES in all; then closes the connection. */
function drain(raw: Readable, alreadyRead: number): void {
  let bytes = alreadyRead;
  raw.on("data", (chunk: Buffer) => {
    bytes += chunk.length;
    if (bytes > DRAIN_LIMIT_BYTES) (raw as Readable & { socket?: { destroy(): void } }).socket?.destroy();
  });
  raw.resume();
}

/**
 * JSON.parse of a body (after a UTF-8 BOM, if any); the result must be a JSON object. Depth is not
 * limited here (JSON.parse does not recurse): the message routes refuse each message nested
 * deeper than MAX_JSON_DEPTH on its own, so one such item does not cost a batch its others.
 */
export function parseJsonObject(body: Buffer | string): Record<string, unknown> {
  const text = typeof body === "string" ? body : jsonText(body);
  let parsed: unknown;
  try {
    parsed = parseJson(text);
  } catch (err) {
    throw errors.invalidJson(err);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw errors.invalidBody("Body must be a JSON object");
  return parsed as Record<string, unknown>;
}

/** A body as text, without a UTF-8 BOM. */
export function jsonText(body: Buffer): string {
  const text = body.toString("utf8");
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

const QUOTE = 0x22, BACKSLASH = 0x5c, OPEN_BRACE = 0x7b, OPEN_BRACKET = 0x5b, CLOSE_BRACE = 0x7d, CLOSE_BRACKET = 0x5d;

/** Whether JSON text nests objects/arrays deeper than `max`, ignoring brackets inside strings. */
export function jsonDepthExceeds(text: string, max: number): boolean {
  // Fewer than `max` opening brackets cannot nest deeper than `max`; counting them with indexOf is
  // far cheaper than the loop below, which typical messages never reach. (On the text, not the
  // Buffer: Buffer's indexOf crosses into C++ on every call, ~5x the cost for a track call.)
  let opening = 0;
  for (const bracket of ["{", "["]) {
    for (let at = text.indexOf(bracket); at !== -1 && opening <= max; at = text.indexOf(bracket, at + 1)) opening++;
  }
  if (opening <= max) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const b = text.charCodeAt(i);
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
