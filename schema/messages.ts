// The Segment message shapes accepted by the Tracking API. Ingest validates every message
// against these schemas; the reason a message is not accepted is derived from which rule failed.
import { Type, type Static, type TSchema } from "@sinclair/typebox";

export const MESSAGE_TYPES = ["identify", "track", "page", "screen", "group", "alias"] as const;
export type MessageType = (typeof MESSAGE_TYPES)[number];
/** Types stored in TRACKHOOK_EVENTS: the six message kinds plus delete notifications. */
export const STORED_TYPES = [...MESSAGE_TYPES, "delete"] as const;
export type StoredType = (typeof STORED_TYPES)[number];

/** An identifier: SDKs send strings, hand-written HTTP calls sometimes numbers (kept as strings). */
const Identifier = Type.Union([Type.String({ minLength: 1 }), Type.Number()]);
const FreeObject = Type.Object({}, { additionalProperties: true });
/**
 * Date fields take any value: one that is not a date string is ignored for timestamp arithmetic
 * (ingest's enrich), so a bad clock field (an epoch number, "yesterday") never costs the message.
 */
const DateText = Type.Unknown({ description: "An ISO-8601 date string; anything else is ignored" });

export const Integrations = Type.Record(Type.String(), Type.Union([Type.Boolean(), FreeObject]), {
  description: "Destination switches: keys are destination names (case-sensitive), `All` is the default",
});
export type Integrations = Static<typeof Integrations>;

const common = {
  // Becomes part of the Nats-Msg-Id header: printable characters only. No lone surrogate (UTF-16
  // half of a pair, which no UTF-8 can carry): it cannot go into a header, and was stored but never delivered.
  messageId: Type.Optional(Type.String({ minLength: 1, maxLength: 100, pattern: "^[^\\x00-\\x1f\\x7f\\uD800-\\uDFFF]+$" })),
  userId: Type.Optional(Identifier),
  anonymousId: Type.Optional(Identifier),
  timestamp: Type.Optional(DateText),
  originalTimestamp: Type.Optional(DateText),
  sentAt: Type.Optional(DateText),
  context: Type.Optional(FreeObject),
  integrations: Type.Optional(Integrations),
};

/** "At least one of userId or anonymousId": every kind but alias, which names both ids itself. */
const identified = { anyOf: [{ required: ["userId"] }, { required: ["anonymousId"] }] };

function kind<T extends Record<string, TSchema>>(type: MessageType, fields: T, extra: object = identified) {
  return Type.Object(
    { type: Type.Literal(type), ...common, ...fields },
    { additionalProperties: true, ...extra },
  );
}

export const IdentifyMessage = kind("identify", { traits: Type.Optional(FreeObject) });
export const TrackMessage = kind("track", {
  event: Type.String({ minLength: 1 }),
  properties: Type.Optional(FreeObject),
});
export const PageMessage = kind("page", {
  name: Type.Optional(Type.String()),
  category: Type.Optional(Type.String()),
  properties: Type.Optional(FreeObject),
});
export const ScreenMessage = kind("screen", {
  name: Type.Optional(Type.String()),
  category: Type.Optional(Type.String()),
  properties: Type.Optional(FreeObject),
});
export const GroupMessage = kind("group", { groupId: Identifier, traits: Type.Optional(FreeObject) });
export const AliasMessage = kind("alias", { previousId: Identifier, userId: Identifier }, {});

export const MESSAGE_SCHEMAS = {
  identify: IdentifyMessage,
  track: TrackMessage,
  page: PageMessage,
  screen: ScreenMessage,
  group: GroupMessage,
  alias: AliasMessage,
} as const satisfies Record<MessageType, TSchema>;

export type IdentifyMessage = Static<typeof IdentifyMessage>;
export type TrackMessage = Static<typeof TrackMessage>;
export type PageMessage = Static<typeof PageMessage>;
export type ScreenMessage = Static<typeof ScreenMessage>;
export type GroupMessage = Static<typeof GroupMessage>;
export type AliasMessage = Static<typeof AliasMessage>;
export type Message = IdentifyMessage | TrackMessage | PageMessage | ScreenMessage | GroupMessage | AliasMessage;

/** A message as stored in TRACKHOOK_EVENTS: accepted, enriched, with the ingest's fields set. */
export type StoredMessage = Message & {
  messageId: string;
  receivedAt: string;
  originalTimestamp: string;
  timestamp: string;
  context: Record<string, unknown> & { library: { name: string; version: string } };
};

/** The body of a batch call (`/v1/batch`, `/v1/import`, `/v1/b`). Items are checked one by one. */
export const BatchBody = Type.Object(
  {
    batch: Type.Array(Type.Unknown()),
    context: Type.Optional(FreeObject),
    integrations: Type.Optional(Integrations),
    sentAt: Type.Optional(DateText),
    writeKey: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);
export type BatchBody = Static<typeof BatchBody>;
