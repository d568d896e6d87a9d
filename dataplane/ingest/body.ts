// Reads a request body with its limit enforced on the decompressed bytes *while reading*, so a
// gzip bomb is stopped after `limit` bytes of output instead of being inflated in memory.
import type { IncomingHttpHeaders } from "node:http";
import { createGunzip, createInflate } from "node:zlib";
import { pipeline, type Readable } from "node:stream";
import { errors, type IngestError } from "./errors.ts";

export async function readBoundedBody(
  raw: Readable,
  headers: IncomingHttpHeaders,
  limit: number,
  tooLarge: () => IngestError,
): Promise<Buffer> {
  const encoding = (headers["content-encoding"] ?? "identity").trim().toLowerCase();
  const declared = Number(headers["content-length"]);
  // Compressed data can be a little larger than its output; anything past this margin cannot fit.
  const wireLimit = limit + 16 * 1024;
  if (declared > (encoding === "identity" ? limit : wireLimit)) throw tooLarge();

  let source: Readable = raw;
  // pipeline(), not pipe(): a client that disconnects must end the decompressor too, or the
  // read below would wait forever.
  if (encoding === "gzip" || encoding === "x-gzip") source = pipeline(raw, createGunzip(), () => {});
  else if (encoding === "deflate") source = pipeline(raw, createInflate(), () => {});
  else if (encoding !== "identity") throw errors.unsupportedEncoding(encoding);

  // Compressed bytes are bounded too: gzip members that inflate to nothing cost no output.
  let wireBytes = 0;
  const countWire = (chunk: Buffer) => {
    wireBytes += chunk.length;
    if (wireBytes > wireLimit) source.destroy(tooLarge());
  };
  if (source !== raw) raw.on("data", countWire);

  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of source as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limit) {
        source.destroy();
        throw tooLarge();
      }
      chunks.push(chunk);
    }
  } catch (err) {
    if ((err as IngestError).statusCode) throw err;
    if (wireBytes > wireLimit) throw tooLarge();
    if (source !== raw) throw errors.invalidCompression(err);
    throw err;
  } finally {
    raw.off("data", countWire);
  }
  return Buffer.concat(chunks, size);
}

/** JSON.parse of a body, after a UTF-8 BOM if any; the result must be a JSON object. */
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
