// Whether a stored message goes to a destination: the message's `integrations` decide, by the
// destination's own name, then the generic `Webhooks`, then `All` (default on). Keys are
// case-sensitive. Delete notifications ignore `integrations`: a deletion must always reach the
// receiver. An object value (per-destination options in Segment) counts as on.
import type { StoredType } from "../../schema/mod.ts";

export function routesTo(message: { type: StoredType; integrations?: Record<string, unknown> }, destinationName: string): boolean {
  if (message.type === "delete") return true;
  const integrations = message.integrations ?? {};
  for (const key of [destinationName, "Webhooks", "All"]) {
    const value = integrations[key];
    if (typeof value === "boolean") return value;
    if (value !== null && typeof value === "object") return true;
  }
  return true;
}
