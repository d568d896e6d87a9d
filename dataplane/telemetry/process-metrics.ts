// Node's process metrics (CPU, memory, GC, event-loop lag), as every trackhook process serves them.
import { collectDefaultMetrics, type Registry } from "prom-client";

/**
 * prom-client's defaults. Its event-loop delay histogram samples every 10 ms, which wakes an idle
 * process 100 times a second (~0.37 s of CPU a minute); sampling once a second instead was tried
 * and dropped: the histogram counts the sampling interval in every reading, so each
 * nodejs_eventloop_lag_* percentile then read ~1 s on an idle process (found by the review of
 * that change), misleading any dashboard or alert on them.
 */
export function collectProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
}
