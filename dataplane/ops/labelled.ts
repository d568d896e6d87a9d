// prom-client hashes the label object on every inc() and observe(): sorted keys, joined into a
// string, per call. On hot paths (every request, every delivery attempt) the label-bound child is
// kept instead, looked up by the label values themselves.
import type { Counter, Histogram } from "prom-client";

/** Label values in the metric's labelNames order. */
type Values = readonly string[];

/**
 * A lookup of `metric.labels(...values)` children, made once per distinct label values.
 * The cache holds what prom-client itself keeps for those values, so it grows no further.
 */
export function labelledChildren<M extends Counter<string> | Histogram<string>>(metric: M): (...values: Values) => ReturnType<M["labels"]> {
  const children = new Map<string, ReturnType<M["labels"]>>();
  return (...values) => {
    // U+0000 cannot occur in a label value that means anything, so keys cannot collide.
    const key = values.join("\u0000");
    let child = children.get(key);
    if (!child) children.set(key, (child = metric.labels(...values) as ReturnType<M["labels"]>));
    return child;
  };
}
