// What the services share to say what they do without flooding: lines let through once per
// interval, counters with a tally for tests and logs, label sets retired when their resource is
// gone, and the gauges of a stream's use. (The endpoints that serve them are in ../ops/.)
export { LogInterval, KeyedLogInterval } from "./log-interval.ts";
export { TalliedCounter } from "./tally.ts";
export { LabelRetirement, RETIRE_AFTER_MS } from "./retire-labels.ts";
export { streamUseGauges, streamsRecreatedCounter, type StreamUse } from "./stream-gauges.ts";
export { collectProcessMetrics } from "./process-metrics.ts";
