// The header block of the ingest's JetStream publishes, without the general-purpose machinery.
//
// Why: nats.js builds a header block through MsgHdrsImpl (a Map of arrays, MIME canonicalisation
// and two key searches per set) and encodes it with TextEncoder, which allocates a fresh
// ArrayBuffer per call: 1.0 µs per message against 0.24 µs here (a loop of a million on this
// machine), where a whole /v1/track request costs the ingest ~37 µs.
import type { MsgHdrs } from "@nats-io/transport-node";

const CR_OR_LF = /[\r\n]/;

/** Thrown for an id a header cannot carry; the ingest's schema already refuses control characters. */
export class InvalidMsgIdError extends Error {
  readonly code = "TRACKHOOK_INVALID_MSG_ID";
  constructor() {
    super("a Nats-Msg-Id cannot contain \\r or \\n");
    this.name = "InvalidMsgIdError";
  }
}

/**
 * A header block holding only `Nats-Msg-Id`, for the `headers` option of `nc.publish()`.
 *
 * nats.js's publish reads nothing of its headers but `encode()` (nats-core 3.x, protocol.ts), so
 * this is all `nc.publish()` and `nc.request()` need, without the tracing options (traceOnly,
 * traceDestination call set() on the headers) and not for `js.publish()`. test/nats/publish-wire.test.ts
 * stores messages through it on a real server and reads the header bytes and the deduplication
 * back, and fails if a nats.js upgrade changes that.
 *
 * The id is trimmed at the end as MsgHdrsImpl.set() did (the NATS header format leaves trailing
 * whitespace out of a value), so deduplication is what it was with nats.js's headers().
 */
export function msgIdHeader(id: string): MsgHdrs {
  if (CR_OR_LF.test(id)) throw new InvalidMsgIdError();
  // Buffer.from takes small strings from a shared pool; TextEncoder allocates per call.
  const bytes = Buffer.from(`NATS/1.0\r\nNats-Msg-Id: ${id.trimEnd()}\r\n\r\n`, "utf8");
  return { encode: () => bytes } as unknown as MsgHdrs;
}
