// The Ready condition in metav1.Condition shape, as kubectl wait, Helm --wait and kstatus read it.
import type { Condition } from "../schema/mod.ts";

export interface ReadyState {
  status: "True" | "False" | "Unknown";
  /** CamelCase, e.g. Reconciled, SecretNotFound. */
  reason: string;
  message: string;
}

/**
 * The conditions with Ready set to `state`. lastTransitionTime changes only when the status
 * flips (a new reason alone is not a transition), as apimachinery's SetStatusCondition does.
 */
export function withReady(conditions: readonly Condition[] | undefined, state: ReadyState, generation: number | undefined, now = new Date()): Condition[] {
  const others = (conditions ?? []).filter((c) => c.type !== "Ready");
  const previous = conditions?.find((c) => c.type === "Ready");
  const ready: Condition = {
    type: "Ready",
    status: state.status,
    reason: state.reason,
    message: state.message.slice(0, 32_768),
    lastTransitionTime: previous && previous.status === state.status ? previous.lastTransitionTime : now.toISOString().replace(/\.\d+Z$/, "Z"),
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
  };
  return [...others, ready];
}

export function readyOf(conditions: readonly Condition[] | undefined): Condition | undefined {
  return conditions?.find((c) => c.type === "Ready");
}
