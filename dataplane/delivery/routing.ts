// Whether a stored message goes to a destination: the message's `integrations` decide, by the
// destination's own name, then the generic `Webhooks`, then `All` (default on). Keys are
// case-sensitive, except that `all` counts as `All` when there is no `All`: analytics-go's
// DisableAll() sends it so, and Segment reads the catch-all without case (facade's enabled(),
// through obj-case); found by an SDK review, such messages reached every webhook. Delete
// notifications ignore `integrations`: a deletion must always reach the receiver. An object value
// (per-destination options in Segment) counts as on.
import type { StoredType } from "../../schema/mod.ts";

export function routesTo(message: { type: StoredType; integrations?: Record<string, unknown> }, destinationName: string): boolean {
  if (message.type === "delete") return true;
  const integrations = message.integrations ?? {};
  for (const key of [destinationName, "Webhooks", "All", "all"]) {
    const value = integrations[key];
    if (typeof value === "boolean") return value;
    if (value !== null && typeof value === "object") return true;
  }
  return true;
}
