// The Ready, Stalled and Delivering conditions in metav1.Condition shape, as kubectl wait, Helm --wait and kstatus read them.
import type { Condition } from "../schema/mod.ts";

export interface ReadyState {
  status: "True" | "False" | "Unknown";
  /** CamelCase, e.g. Reconciled, SecretNotFound. */
  reason: string;
  message: string;
}

/**
 * The conditions with one of `type` set to `state`, or taken out when `state` is undefined.
 * lastTransitionTime changes only when the status flips (a new reason alone is not a
 * transition), as apimachinery's SetStatusCondition does.
 */
function withCondition(conditions: readonly Condition[] | undefined, type: string, state: ReadyState | undefined, generation: number | undefined, now: Date): Condition[] {
  const others = (conditions ?? []).filter((c) => c.type !== type);
  if (!state) return others;
  const previous = conditionOf(conditions, type);
  return [
    ...others,
    {
      type,
      status: state.status,
      reason: state.reason,
      message: state.message.slice(0, 32_768),
      lastTransitionTime: previous && previous.status === state.status ? previous.lastTransitionTime : conditionTime(now),
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
    },
  ];
}

/** The conditions with Ready set to `state`. */
export function withReady(conditions: readonly Condition[] | undefined, state: ReadyState, generation: number | undefined, now = new Date()): Condition[] {
  return withCondition(conditions, "Ready", state, generation, now);
}

/**
 * The conditions with `Stalled` (kstatus's "failed for good": Flux's wait and `kstatus` report
 * Failed at once instead of waiting for Ready to its timeout) set, or taken out when `state` is
 * undefined.
 */
export function withStalled(conditions: readonly Condition[] | undefined, state: { reason: string; message: string } | undefined, generation: number | undefined, now = new Date()): Condition[] {
  return withCondition(conditions, "Stalled", state && { status: "True", ...state }, generation, now);
}

export function readyOf(conditions: readonly Condition[] | undefined): Condition | undefined {
  return conditionOf(conditions, "Ready");
}

/** A time as metav1.Time writes it: RFC 3339 in whole seconds. */
export function conditionTime(date: Date): string {
  return date.toISOString().replace(/\.\d+Z$/, "Z");
}

/**
 * The conditions with `Delivering` (how delivery to a WebhookDestination goes: delivery-health.ts)
 * set, or taken out when `state` is undefined (a disabled destination delivers nothing).
 */
export function withDelivering(conditions: readonly Condition[] | undefined, state: ReadyState | undefined, generation: number | undefined, now = new Date()): Condition[] {
  return withCondition(conditions, "Delivering", state, generation, now);
}

export function conditionOf(conditions: readonly Condition[] | undefined, type: string): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}
