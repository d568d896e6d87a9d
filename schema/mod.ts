// The schema module: the single source of truth for message shapes, resource specs and the
// compiled config. Types are Static<> of these schemas; validators and crds/*.yaml derive from them.
export * from "./messages.ts";
export * from "./resources.ts";
export * from "./compiled-config.ts";
export * from "./validators.ts";
export { parseDuration, formatDuration, DURATION_PATTERN } from "./duration.ts";
export { KINDS, buildCrd } from "./crds.ts";
