// What the SDK compatibility tests (test/ingest/sdk*.test.ts) check alike, whatever the SDK.
import { expect } from "vitest";
import type { StoredMessage } from "../../schema/mod.ts";

export type Json = Record<string, unknown>;

export const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
/** How trackhook writes every time it stores: UTC, milliseconds, `Z`. */
export const ISO_UTC_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** A time in trackhook's form (a real date, as toISOString writes it) near the test's clock. */
export function isoNearNow(value: unknown, toleranceMs = 60_000): void {
  expect(value).toMatch(ISO_UTC_MS);
  const ms = Date.parse(value as string);
  expect(new Date(ms).toISOString()).toBe(value);
  expect(Math.abs(Date.now() - ms)).toBeLessThan(toleranceMs);
}

/**
 * The stored copy of a sent message, found by its messageId: it must be there, on its source's
 * subject for its type (source `default/web` of the ingest harness), with the per-source Nats-Msg-Id.
 */
export function storedAs(byId: Map<unknown, { subject: string; msgId: string | undefined; body: StoredMessage }>, type: unknown, messageId: string): Json {
  const hit = byId.get(messageId);
  expect(hit, `stored ${String(type)} ${messageId}`).toBeDefined();
  expect(hit!.subject).toBe(`trackhook.events.default.web.${String(type)}`);
  expect(hit!.msgId).toBe(`default/web/${messageId}`);
  return hit!.body as unknown as Json;
}

/** `timestamp` as trackhook corrects it for clock skew: receivedAt - (sentAt - originalTimestamp). */
export function skewCorrectedMs(stored: Json): number {
  const [received, sentAt, original] = [stored.receivedAt, stored.sentAt, stored.originalTimestamp].map((v) => Date.parse(v as string));
  return received! - (sentAt! - original!);
}
