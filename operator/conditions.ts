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

/**
 * The conditions with `Stalled` (kstatus's "failed for good": Flux's wait and `kstatus` report
 * Failed at once instead of waiting for Ready to its timeout) set, or taken out when `state` is
 * undefined.
 */
export function withStalled(conditions: readonly Condition[] | undefined, state: { reason: string; message: string } | undefined, generation: number | undefined, now = new Date()): Condition[] {
  const others = (conditions ?? []).filter((c) => c.type !== "Stalled");
  if (!state) return others;
  const previous = conditions?.find((c) => c.type === "Stalled");
  return [
    ...others,
    {
      type: "Stalled", status: "True", reason: state.reason, message: state.message.slice(0, 32_768),
      lastTransitionTime: previous?.status === "True" ? previous.lastTransitionTime : now.toISOString().replace(/\.\d+Z$/, "Z"),
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
    },
  ];
}

export function readyOf(conditions: readonly Condition[] | undefined): Condition | undefined {
  return conditions?.find((c) => c.type === "Ready");
}
