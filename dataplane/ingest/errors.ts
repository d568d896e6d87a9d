// Every answer the ingest gives other than 200, with a stable `code` clients and dashboards can
// branch on. The body is {"success": false, "code", "message"}: analytics-python reads code and
// message, analytics-ruby reads `error`, so `error` repeats the message.

/** Every code an error answer can carry; each is documented in docs/operations.md (a test checks). */
export const INGEST_ERROR_CODES = [
  "invalid_json",
  "invalid_body",
  "invalid_compression",
  "unsupported_content_encoding",
  "request_too_large",
  "batch_too_large",
  "batch_item_too_large",
  "too_many_batch_items",
  "missing_write_key",
  "invalid_write_key",
  "not_found",
  "method_not_allowed",
  "storage_unavailable",
  "client_aborted",
  "request_timeout",
  "headers_too_large",
  "malformed_request",
  "storage_full",
  "rate_limited",
  "shutting_down",
  "overloaded",
  "internal_error",
] as const;
export type IngestErrorCode = (typeof INGEST_ERROR_CODES)[number];

export class IngestError extends Error {
  readonly code: IngestErrorCode;
  readonly statusCode: number;
  /** Seconds, for 503s and 429s. */
  readonly retryAfter: number | undefined;
  /**
   * Answered before the body was read in full, the rest is read and dropped rather than the
   * connection closed: true for a body over a size limit, whose rest is well-formed and bounded
   * by the request timeout (an SDK that reads the answer only after sending all of it gets it).
   */
  readonly drainBody: boolean;
  constructor(code: IngestErrorCode, statusCode: number, message: string, options: { cause?: unknown; retryAfter?: number; drainBody?: boolean } = {}) {
    super(message, { cause: options.cause });
    this.name = "IngestError";
    this.code = code;
    this.statusCode = statusCode;
    this.retryAfter = options.retryAfter;
    this.drainBody = options.drainBody ?? false;
  }

  toJSON() {
    return { success: false, code: this.code, message: this.message, error: this.message };
  }
}

const kb = (bytes: number) => `${Math.round(bytes / 1024)}KB`;

export const errors = {
  invalidJson: (cause?: unknown) => new IngestError("invalid_json", 400, "Body is not valid JSON", { cause }),
  invalidBody: (what: string) => new IngestError("invalid_body", 400, what),
  invalidCompression: (cause?: unknown) =>
    new IngestError("invalid_compression", 400, "Body could not be decompressed with its Content-Encoding", { cause }),
  unsupportedEncoding: (encoding: string) =>
    new IngestError("unsupported_content_encoding", 415, `Content-Encoding "${encoding}" is not supported (use gzip, deflate or none)`),
  requestTooLarge: (limit: number) => new IngestError("request_too_large", 400, `Request body is over the ${kb(limit)} limit for a single message`, { drainBody: true }),
  batchTooLarge: (limit: number, when = "") =>
    new IngestError("batch_too_large", 400, `Batch request body is over the ${kb(limit)} limit${when ? ` ${when}` : ""}`, { drainBody: true }),
  batchItemTooLarge: (index: number, limit: number, when = "") =>
    new IngestError("batch_item_too_large", 400, `Batch item ${index} is over the ${kb(limit)} limit for one message${when ? ` ${when}` : ""}`, { drainBody: true }),
  tooManyBatchItems: (count: number, limit: number) =>
    new IngestError("too_many_batch_items", 400, `Batch has ${count} items; the limit is ${limit}`),
  missingWriteKey: () =>
    new IngestError("missing_write_key", 401, "No write key: send it as the Basic auth username or as writeKey in the body"),
  invalidWriteKey: () => new IngestError("invalid_write_key", 401, "Unknown or disabled write key"),
  notFound: (what = "Not found") => new IngestError("not_found", 404, what),
  methodNotAllowed: (method: string, path: string) =>
    new IngestError("method_not_allowed", 405, `${path} takes POST, not ${method}`),
  storageUnavailable: (retryAfter: number, cause?: unknown) =>
    new IngestError("storage_unavailable", 503, "Messages could not be stored; retry later", { cause, retryAfter }),
  storageFull: (retryAfter: number, cause?: unknown) =>
    new IngestError("storage_full", 503, "The event stream is full; retry later", { cause, retryAfter }),
  rateLimited: (retryAfter: number, perSecond: number) =>
    new IngestError("rate_limited", 429, `This source is over its limit of ${perSecond} messages a second; retry after ${retryAfter} s`, { retryAfter }),
  overloaded: (retryAfter: number) =>
    // The rest of the body is read and dropped (not held), so the SDK gets the 503, not a reset.
    new IngestError("overloaded", 503, "This server holds as many request bodies as it takes at once; retry", { retryAfter, drainBody: true }),
  shuttingDown: (retryAfter: number) =>
    new IngestError("shutting_down", 503, "This server is shutting down; retry (another replica will answer)", { retryAfter }),
  /** The client went away mid-body: nothing was read, nothing stored, nobody to answer. */
  clientAborted: (cause?: unknown) => new IngestError("client_aborted", 400, "The client closed the connection before the body was read", { cause }),
  requestTimeout: (seconds: number) =>
    new IngestError("request_timeout", 408, `The request was not received in full within ${seconds} s`),
  headersTooLarge: () => new IngestError("headers_too_large", 431, "The request's headers are over the server's limit"),
  malformedRequest: () => new IngestError("malformed_request", 400, "The request is not valid HTTP"),
  internal: (cause?: unknown) => new IngestError("internal_error", 500, "Internal error", { cause }),
} as const;
