// The compiled config: what `--config` files (or the operator, via the trackhook-config KV
// bucket) turn into, and the only config shape the data plane reads. Write keys appear as
// SHA-256 digests only.
import { Type, type Static } from "@sinclair/typebox";
import { DNS_LABEL } from "./resources.ts";

const Name = Type.String({ minLength: 1, maxLength: 63, pattern: DNS_LABEL });

const WriteKeyDigest = Type.Object({ sha256: Type.String({ pattern: "^[0-9a-f]{64}$" }), secretKey: Type.String() }, { additionalProperties: false });

export const CompiledSource = Type.Object(
  {
    namespace: Name,
    name: Name,
    enabled: Type.Boolean(),
    writeKeySha256: Type.String({ pattern: "^[0-9a-f]{64}$" }),
    /** Keys accepted besides the main one, each with the Secret it came from (`<name>/<key>`), for metrics. */
    additionalWriteKeys: Type.Optional(Type.Array(WriteKeyDigest, { maxItems: 4 })),
    /**
     * Additional keys held for the source but not accepted (their Secret cannot be read now): no
     * other Source may take them meanwhile. Read by the operator only.
     */
    reservedWriteKeys: Type.Optional(Type.Array(WriteKeyDigest, { maxItems: 4 })),
    displayName: Type.Optional(Type.String()),
    /** Messages a second per ingest replica, and how many at once after a quiet spell. */
    rateLimit: Type.Optional(
      Type.Object({ perSecond: Type.Integer({ minimum: 1 }), burst: Type.Integer({ minimum: 1 }) }, { additionalProperties: false }),
    ),
  },
  { additionalProperties: false },
);
export type CompiledSource = Static<typeof CompiledSource>;

export const CompiledDestination = Type.Object(
  {
    namespace: Name,
    name: Name,
    enabled: Type.Boolean(),
    /** Source names in the destination's namespace, selector already resolved. */
    sources: Type.Array(Name),
    urls: Type.Array(Type.String(), { minItems: 1, maxItems: 5 }),
    headers: Type.Array(Type.Object({ name: Type.String(), value: Type.String() }, { additionalProperties: false })),
    sharedSecret: Type.Optional(Type.String()),
    /** Secrets that also sign webhook-signature, after sharedSecret (a rotation's old secret). */
    additionalSharedSecrets: Type.Optional(Type.Array(Type.String(), { minItems: 1, maxItems: 4 })),
    timeoutMs: Type.Integer({ minimum: 1 }),
    retryWindowMs: Type.Integer({ minimum: 1 }),
    maxInFlight: Type.Integer({ minimum: 1 }),
    standardWebhooks: Type.Boolean(),
    /**
     * When the resource was created (metadata.creationTimestamp), if known: the consumer of a
     * destination that is new starts there, so what was stored between the destination's creation
     * and its consumer's (events sent at once, a delete notification) is delivered too.
     */
    createdAt: Type.Optional(Type.String()),
    /**
     * Since when the destination has been enabled without a break (the operator's
     * status.deliveringSince): a consumer made again for it starts at the events stream's
     * beginning when the stream is younger than this (a NATS store lost, a move to another NATS).
     * A `--config` destination has none: delivery knows when it is the first on a NATS.
     */
    deliveringSince: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);
export type CompiledDestination = Static<typeof CompiledDestination>;

export const CompiledConfig = Type.Object(
  {
    sources: Type.Array(CompiledSource),
    destinations: Type.Array(CompiledDestination),
  },
  { additionalProperties: false },
);
export type CompiledConfig = Static<typeof CompiledConfig>;
