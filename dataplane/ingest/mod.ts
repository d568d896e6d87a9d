// The ingest service: Segment's Tracking API in front of JetStream.
export { buildIngestApp, type IngestActivity, type IngestAppDeps } from "./app.ts";
export { resolveIngestOptions, InvalidOptionsError, IngestOptionsSchema, type IngestOptions, type IngestOptionsInput } from "./options.ts";
export { INGEST_ERROR_CODES, IngestError, errors as ingestErrors, type IngestErrorCode } from "./errors.ts";
export { IngestMetrics } from "./metrics.ts";
export { REJECT_REASONS, type RejectReason } from "./accept.ts";
export { SourceDirectory, basicAuthUser } from "./auth.ts";
