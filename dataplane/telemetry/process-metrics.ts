// Node's process metrics (CPU, memory, GC, event-loop lag), as every trackhook process serves them.
import { collectDefaultMetrics, type Registry } from "prom-client";

/**
 * prom-client's defaults, with the event loop's delay sampled once a second instead of every
 * 10 ms: its timer woke every process 100 times a second at idle, 0.37 s of CPU a minute and 6,000
 * context switches, for a histogram no dashboard or alert reads (found by an idle-footprint
 * review; 0.06 s and 220 a minute with it). Lag that matters lasts longer than a second.
 */
export function collectProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 1000 });
}
