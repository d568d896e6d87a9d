// The bytes a webhook receives and the headers that authenticate them. The body is serialised
// once; the same bytes go to every URL and are what the signatures cover.
import { createHmac, createSecretKey, type KeyObject } from "node:crypto";
import type { StoredMessage, StoredType } from "../../schema/mod.ts";
import { parseJson } from "../json.ts";

export type DeliverableMessage = (StoredMessage | { type: "delete"; userId: string; timestamp: string; messageId: string }) & {
  type: StoredType;
};

const VERSION_PREFIX = Buffer.from('{"version":1,');
const OPEN_BRACE = 0x7b;

/**
 * The stored message plus `version: 1` (not on delete); alias also carries the spec's literal keys.
 * @param stored the message's stored JSON bytes, when at hand: the common case then splices
 *   `"version":1,` into them instead of serialising the message again. The result is the same
 *   JSON (byte for byte, unless the message has integer-like keys, which JSON.stringify would
 *   have put before `version`); the signatures cover whatever bytes are sent.
 */
export function webhookBody(message: DeliverableMessage, stored?: Uint8Array): Buffer {
  if (message.type === "delete") return Buffer.from(JSON.stringify(message));
  // A message of its own `version` (it must not stay beside ours) and alias (more keys) are rebuilt.
  if (stored !== undefined && stored[0] === OPEN_BRACE && message.type !== "alias" && !Object.hasOwn(message, "version")) {
    return Buffer.concat([VERSION_PREFIX, stored.subarray(1)]);
  }
  // Rebuilt from the stored bytes when at hand, read so that numbers a double cannot hold stay as written.
  const source = stored !== undefined ? (parseJson(Buffer.from(stored.buffer, stored.byteOffset, stored.byteLength).toString()) as DeliverableMessage) : message;
  const body: Record<string, unknown> = { version: 1, ...source };
  body.version = 1; // a client's own top-level `version` must not replace the body format's
  if (message.type === "alias") {
    body["Previous ID"] = (source as { previousId?: unknown }).previousId;
    body["User ID"] = (source as { userId?: unknown }).userId;
  }
  return Buffer.from(JSON.stringify(body));
}

/** The spec's signature header (schema's RESERVED_WEBHOOK_HEADERS keeps destinations from setting it). */
export const SIGNATURE_HEADER = "X-Signature";

/**
 * X-Signature: hex HMAC-SHA1 of the exact body bytes, keyed by the shared secret (the spec's
 * scheme): its UTF-8 bytes, or a KeyObject made of them.
 */
export function xSignature(body: Uint8Array, sharedSecret: string | KeyObject): string {
  return createHmac("sha1", sharedSecret).update(body).digest("hex");
}

/** Both schemes' keys of a destination's secrets, made once per destination rather than per signature. */
export interface SigningKeys {
  xSignature: KeyObject;
  /** The main secret's key first, then each additional secret's: one `v1,` signature each. */
  standardWebhooks: KeyObject[];
}

/**
 * X-Signature is made with the main secret only: the spec's header carries one digest. Secrets
 * written differently but of one key (with and without `whsec_`, padded or not) sign once.
 */
export function signingKeys(sharedSecret: string, additionalSharedSecrets: readonly string[] = []): SigningKeys {
  const keys = new Map<string, KeyObject>();
  for (const secret of [sharedSecret, ...additionalSharedSecrets]) {
    const key = standardWebhooksKey(secret);
    const bytes = key.export().toString("hex");
    if (!keys.has(bytes)) keys.set(bytes, key);
  }
  return { xSignature: createSecretKey(Buffer.from(sharedSecret, "utf8")), standardWebhooks: [...keys.values()] };
}

/**
 * Standard base64, padded or not (at most two `=`), four characters at the least: what the
 * JavaScript library's `new Webhook(secret)` decodes (@stablelib/base64), and Buffer.from(, "base64")
 * decodes each such string to the same bytes. Taking only padded ones as base64 signed with the
 * wrong key whenever a secret's padding had been dropped.
 */
const BASE64 = /^(?=.{4})[A-Za-z0-9+/]+={0,2}$/;

/**
 * The Standard Webhooks key, as the official libraries derive it (`new Webhook(secret)`): the
 * secret without its `whsec_` prefix, base64-decoded. A secret that is not base64 ("change-me"),
 * which those libraries refuse, is used as its UTF-8 bytes (verify with their raw-key option).
 */
function standardWebhooksKey(sharedSecret: string): KeyObject {
  const secret = sharedSecret.startsWith("whsec_") ? sharedSecret.slice(6) : sharedSecret;
  return createSecretKey(BASE64.test(secret) ? Buffer.from(secret, "base64") : Buffer.from(secret, "utf8"));
}

/**
 * Standard Webhooks headers (standardwebhooks.com): `webhook-signature` is
 * `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, keyed by the shared secret or by its
 * key from signingKeys(). Given several, one signature per secret, space-separated: the
 * standard's libraries accept a request when any of them verifies, which lets a receiver move
 * to a new secret while the old one still signs.
 */
export function standardWebhookHeaders(
  id: string,
  timestampSeconds: number,
  body: Uint8Array,
  sharedSecrets: string | KeyObject | ReadonlyArray<string | KeyObject>,
): Record<string, string> {
  const signed = `${id}.${timestampSeconds}.`;
  const signatures = (Array.isArray(sharedSecrets) ? sharedSecrets : [sharedSecrets]).map((secret: string | KeyObject) => {
    const key = typeof secret === "string" ? standardWebhooksKey(secret) : secret;
    return `v1,${createHmac("sha256", key).update(signed).update(body).digest("base64")}`;
  });
  return { "webhook-id": id, "webhook-timestamp": String(timestampSeconds), "webhook-signature": signatures.join(" ") };
}
