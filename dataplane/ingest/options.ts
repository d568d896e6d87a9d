// Ingest options: one schema with defaults, validated once at startup into a frozen object.
import { isIP } from "node:net";
import { Type, type Static } from "@sinclair/typebox";
import { Ajv } from "ajv";
import { describeErrors } from "../../schema/mod.ts";

export const IngestOptionsSchema = Type.Object(
  {
    limits: Type.Object(
      {
        /** A single-message request (spec: 32KB). */
        singleBytes: Type.Integer({ minimum: 1024, default: 32 * 1024 }),
        /** A batch request (spec: 500KB); the body may be 16 KiB larger (BATCH_ENVELOPE_ALLOWANCE). */
        batchBytes: Type.Integer({ minimum: 1024, default: 500 * 1024 }),
        /** One item of a batch (spec: 32KB). */
        itemBytes: Type.Integer({ minimum: 256, default: 32 * 1024 }),
        batchItems: Type.Integer({ minimum: 1, default: 2500 }),
      },
      { default: {}, additionalProperties: false },
    ),
    /**
     * Batch body bytes (decompressed) held at once, all requests together; beyond, a batch
     * still arriving is answered 503 `overloaded` (see body-budget.ts). 8 MiB is ~20 batches of
     * 400KB: 128 of them sent at once peaked at 373 MB, as 8 at once do, where 16 MiB let it
     * reach 406 MB, 32 MiB 535 MB, and no budget 544 MB (and, at 256, out of heap).
     */
    bodyBytesInFlight: Type.Integer({ minimum: 64 * 1024, default: 8 * 1024 * 1024 }),
    /** Origins allowed by CORS; "*" allows any. */
    corsOrigins: Type.Array(Type.String(), { default: ["*"] }),
    /** Proxies whose X-Forwarded-For is believed (addresses or CIDRs), for context.ip. */
    trustedProxies: Type.Array(Type.String(), { default: [] }),
    /** How long a JetStream publish may take before the request gets 503. */
    publishTimeoutMs: Type.Integer({ minimum: 100, default: 5000 }),
    /**
     * How long a request may take to arrive, headers and body (Node's requestTimeout; Fastify
     * turns it off). A client that stalls mid-body is answered 408 and disconnected after this,
     * instead of holding a socket and its buffered bytes for ever. Generous: a 500KB batch over a
     * poor mobile link takes tens of seconds.
     */
    requestTimeoutMs: Type.Integer({ minimum: 1000, default: 60_000 }),
    /**
     * How long an idle keep-alive connection is kept open (Node's keepAliveTimeout; Node waits a
     * second more). A reverse proxy that keeps its idle upstream connections longer sends a
     * request on one ingest is closing, and answers 502: it must be longer than the proxy's.
     * At most 24 h (Node's timers overflow at 24.8 days).
     */
    keepAliveTimeoutMs: Type.Integer({ minimum: 1000, maximum: 86_400_000, default: 72_000 }),
    /** Retry-After seconds on a 503. */
    retryAfterSeconds: Type.Integer({ minimum: 1, default: 5 }),
    /** The public base URL SDKs use (e.g. https://events.example.com), for the settings endpoint; default: the request's Host. */
    publicUrl: Type.Optional(Type.String({ pattern: "^https?://" })),
  },
  { additionalProperties: false },
);
export type IngestOptions = Readonly<Static<typeof IngestOptionsSchema>>;
export type IngestOptionsInput = Partial<Omit<Static<typeof IngestOptionsSchema>, "limits">> & {
  limits?: Partial<Static<typeof IngestOptionsSchema>["limits"]>;
};

const validate = new Ajv({ useDefaults: true, allErrors: true }).compile<Static<typeof IngestOptionsSchema>>(IngestOptionsSchema);

export class InvalidOptionsError extends Error {
  readonly code = "TRACKHOOK_INVALID_OPTIONS";
}

export function resolveIngestOptions(input: IngestOptionsInput = {}): IngestOptions {
  const options = structuredClone(input) as Static<typeof IngestOptionsSchema>;
  if (!validate(options)) throw new InvalidOptionsError(`invalid ingest options: ${describeErrors(validate.errors).join("; ")}`);
  const badProxy = options.trustedProxies.find((entry) => !isAddressOrCidr(entry));
  if (badProxy) throw new InvalidOptionsError(`invalid ingest options: trustedProxies: "${badProxy}" is not an IP address or CIDR`);
  return deepFreeze(options);
}

function isAddressOrCidr(text: string): boolean {
  const [address, prefix, ...rest] = text.split("/");
  const family = isIP(address ?? "");
  if (family === 0 || rest.length > 0) return false;
  return prefix === undefined || (/^\d+$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128));
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === "object") {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}
