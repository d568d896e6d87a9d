// Decides whether a message is accepted, and if not, why. The rules are the schemas of
// schema/messages.ts; the reason is read from which rule failed.
import type { ErrorObject } from "ajv";
import { checkableField, rawNumberText } from "../json.ts";
import { MESSAGE_SCHEMAS, MESSAGE_TYPES, describeErrors, validateMessage, type MessageType } from "../../schema/mod.ts";

export const REJECT_REASONS = [
  "invalid_message",
  "unknown_type",
  "no_user_anon_id",
  "missing_event",
  "missing_group_id",
  "missing_previous_id",
  "missing_user_id",
  "invalid_field",
  "nested_too_deep",
  "duplicate_message_id",
] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

export type Verdict =
  | { accepted: true; type: MessageType; message: Record<string, unknown> }
  | { accepted: false; reason: RejectReason; detail: string };

const MISSING_REASON: Record<string, RejectReason> = {
  event: "missing_event",
  groupId: "missing_group_id",
  previousId: "missing_previous_id",
  userId: "missing_user_id",
};

const ID_FIELDS = new Set(["userId", "anonymousId", "groupId", "previousId"]);

/**
 * Ids are stored as text, so receivers get one type: hand-written HTTP calls send numbers, and a
 * 64-bit one was kept as written (dataplane/json.ts) and keeps its digits.
 */
const idText = (value: unknown): unknown => (typeof value === "number" ? String(value) : rawNumberText(value));

/**
 * The fields a message schema gives a type (`event`, `properties`, `integrations`...), by message
 * type: a number kept as written must be judged there as the number it is. Any other field (a
 * client's own `orderId`, `properties` of an identify, the date fields, which take anything)
 * keeps it as written.
 */
const TYPED_FIELDS = new Map<unknown, ReadonlySet<string>>(
  Object.entries(MESSAGE_SCHEMAS).map(([type, schema]) => [
    type,
    new Set(Object.entries(schema.properties as Record<string, object>).filter(([, field]) => "type" in field || "anyOf" in field).map(([name]) => name)),
  ]),
);
/** An unknown type is refused whatever its fields: `type` alone is judged. */
const TYPE_ONLY: ReadonlySet<string> = new Set(["type"]);

const isMessageType = (value: unknown): value is MessageType => (MESSAGE_TYPES as readonly unknown[]).includes(value);

/**
 * @param routeType the type the endpoint implies (`/v1/track`, `/v1/t`), which wins over the
 *   body's; undefined for batch items, whose own `type` decides.
 */
export function judge(item: unknown, routeType: MessageType | undefined): Verdict {
  if (item === null || typeof item !== "object" || Array.isArray(item)) {
    return { accepted: false, reason: "invalid_message", detail: "message is not a JSON object" };
  }
  // SDKs send null for absent fields (analytics-python: "userId": null for anonymous users).
  const message: Record<string, unknown> = {};
  const typed = TYPED_FIELDS.get(routeType ?? (item as { type?: unknown }).type) ?? TYPE_ONLY;
  // for-in rather than Object.entries: no array of pairs per message (5x cheaper for a track call).
  for (const key in item) {
    if (!Object.hasOwn(item, key)) continue;
    const value = (item as Record<string, unknown>)[key];
    // "__proto__" would be assigned as the prototype, letting inherited fields pass `required`.
    if (key === "__proto__" || value === null || (value === "" && (key === "userId" || key === "anonymousId"))) continue;
    message[key] = ID_FIELDS.has(key) ? idText(value) : typed.has(key) ? checkableField(key, value) : value;
  }
  const type = routeType ?? message.type;
  if (!isMessageType(type)) {
    // Described, not serialised: the value may be anything, however large or deep.
    const shown = typeof type === "string" ? JSON.stringify(type.slice(0, 64)) : type === undefined || type === null ? "missing" : `a ${Array.isArray(type) ? "array" : typeof type}`;
    return { accepted: false, reason: "unknown_type", detail: `type ${shown} is not one of ${MESSAGE_TYPES.join(", ")}` };
  }
  message.type = type;
  const validate = validateMessage[type];
  if (validate(message)) return { accepted: true, type, message };
  const reason = reasonOf(validate.errors ?? []);
  // The schema's own words only where a field is wrong; the rest have plain ones.
  const detail = REASON_DETAIL[reason] ?? describeErrors(validate.errors).join("; ").replaceAll("(document)", "(message)");
  return { accepted: false, reason, detail };
}

const REASON_DETAIL: Partial<Record<RejectReason, string>> = {
  no_user_anon_id: "neither userId nor anonymousId is set",
  missing_event: "a track needs an event name",
  missing_group_id: "a group call needs a groupId",
  missing_previous_id: "an alias needs a previousId",
  missing_user_id: "an alias needs a userId",
};

function reasonOf(errors: ErrorObject[]): RejectReason {
  if (errors.some((e) => e.instancePath === "" && e.keyword === "anyOf")) return "no_user_anon_id";
  for (const e of errors) {
    if (e.instancePath === "" && e.keyword === "required") {
      const reason = MISSING_REASON[(e.params as { missingProperty: string }).missingProperty];
      if (reason) return reason;
    }
  }
  return "invalid_field";
}
