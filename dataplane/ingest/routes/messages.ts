// The Tracking API: single-message endpoints, their browser aliases, and the batch endpoints.
import { isIP } from "node:net";
import type { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { describeErrors, validateBatchBody, type MessageType } from "../../../schema/mod.ts";
import { judge, type RejectReason } from "../accept.ts";
import { authenticate } from "../auth.ts";
import type { BodyAccount } from "../body-budget.ts";
import { MAX_JSON_DEPTH, jsonDepthExceeds, jsonText, nestedDeeperThan, parseJsonObject, readBoundedBody } from "../body.ts";
import { enrich, type BatchDefaults } from "../enrich.ts";
import { checkableField } from "../../json.ts";
import { errors } from "../errors.ts";
import type { PreparedMessage } from "../publish.ts";
import type { IngestState } from "../state.ts";

/**
 * Bytes a stored message may grow by over what was sent: receivedAt, timestamps, messageId,
 * context.library. A batch's own context and integrations, merged into each item, are allowed
 * besides, up to BATCH_FIELDS_ALLOWANCE per item and BATCH_FIELDS_COPIES in all.
 */
export const ENRICHMENT_ALLOWANCE = 1024;

/**
 * What a batch's own fields may add to each item: a batch within the limits as sent is never
 * refused for them (found by an SDK review: analytics-go sends `DefaultContext` at batch level,
 * and one of 1 KB got a full batch refused with 400 and dropped).
 */
export const BATCH_FIELDS_ALLOWANCE = 32 * 1024;

/**
 * The bytes all the copies of a batch's own fields may come to, checked as they are made: a 31KB
 * context merged into 2,500 items would otherwise be ~80MB of copies and serialising before the
 * answer, for a 136KB request. An analytics-go batch of 250 messages has room here for a
 * `DefaultContext` of 8KB.
 */
const BATCH_FIELDS_COPIES = 2 * 1024 * 1024;

/**
 * Bytes a batch body may carry beyond its `batchBytes` of messages: the spec's 500KB counts the
 * messages, and SDKs fill a batch up to it before adding their own fields. analytics-ruby and
 * analytics-react-native count the items only (up to 512,000 bytes, then `{"batch":[...],
 * "sentAt":...}` around them), analytics-rust reads 500KB as 512 KiB of messages; all of them drop
 * a batch answered 400. 16 KiB holds either, and the batch's context besides.
 */
export const BATCH_ENVELOPE_ALLOWANCE = 16 * 1024;

const SINGLE: Record<string, MessageType> = {
  identify: "identify", i: "identify",
  track: "track", t: "track",
  page: "page", p: "page",
  screen: "screen", s: "screen",
  group: "group", g: "group",
  alias: "alias", a: "alias",
};
// /v1/import (analytics-ruby, classic Android) and /v1/b (analytics.js batching, mobile SDKs).
const BATCH = ["batch", "import", "b"];

/** Every path a message is POSTed to. */
export const MESSAGE_PATHS: ReadonlySet<string> = new Set([...Object.keys(SINGLE), ...BATCH].map((path) => `/v1/${path}`));

/** What a message route's handler is told of its route. */
interface RouteConfig {
  /** Which body limit and shape the route takes. */
  endpoint: "single" | "batch";
  /** For single-message routes: the type the path implies. */
  type?: MessageType;
}

export function messageRoutes(app: FastifyInstance, state: IngestState): void {
  // In a context of their own: only these routes take the body unread.
  void app.register(async (scope) => {
    // Bodies are read by the handler rather than by Fastify's JSON parser: the limit depends on
    // the route, applies after decompression, and SDKs send JSON as text/plain or with no
    // Content-Type. The parser hands the unread stream on as the body.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_request, payload, done) => done(null, payload));
    // Any Content-Type is read as JSON (ADR 2), a malformed one too ("application/json,
    // text/plain", from a client merging headers), which Fastify would answer with 415 before
    // the parser above is asked. Without the header, a body goes to that parser. (mediaType is
    // undefined for a malformed value; Fastify caches the parse, which it needs anyway.)
    scope.addHook("onRequest", (request, _reply, done) => {
      if (request.headers["content-type"] !== undefined && request.mediaType === undefined) request.headers["content-type"] = undefined;
      done();
    });

    // The handler is handed its route's config by closure: request.routeOptions builds a new
    // object per read.
    for (const [path, type] of Object.entries(SINGLE)) {
      const config: RouteConfig = { endpoint: "single", type };
      scope.post(`/v1/${path}`, (req) => handle(state, req, config));
    }
    for (const path of BATCH) {
      const config: RouteConfig = { endpoint: "batch" };
      scope.post(`/v1/${path}`, (req) => handle(state, req, config));
    }
  });
}

async function handle(state: IngestState, request: FastifyRequest, config: RouteConfig) {
  // Batches only: a single message is 32KB at most, and is never refused for others' batches.
  if (config.endpoint !== "batch") return handleWithin(state, request, config);
  // What the body takes of the process's budget is held until the request is answered: its
  // objects and the bytes to store live until then.
  const account = state.bodies.open();
  try {
    return await handleWithin(state, request, config, account.take);
  } finally {
    account.release();
  }
}

async function handleWithin(state: IngestState, request: FastifyRequest, config: RouteConfig, take?: BodyAccount["take"]) {
  const { limits } = state.options;
  const stream = request.body as Readable | undefined;
  if (!stream) throw errors.invalidJson();
  const isBatch = config.endpoint === "batch";
  const limit = isBatch ? limits.batchBytes + BATCH_ENVELOPE_ALLOWANCE : limits.singleBytes;
  const raw = await readBoundedBody(stream, request.headers, limit, () => (isBatch ? errors.batchTooLarge(limit) : errors.requestTooLarge(limit)), take);
  const text = jsonText(raw);
  const body = parseJsonObject(text);
  const { source, additional } = authenticate(state.directory, request.headers.authorization, body.writeKey);
  const sourceId = `${source.namespace}/${source.name}`;
  // Tells the team rotating a key when its old one is no longer in use.
  if (additional) state.metrics.countAdditionalKey(sourceId, additional.secret, additional.key);

  let items: unknown[];
  let batch: BatchDefaults | undefined;
  /** What is wrong with a batch's own fields, which every item takes on: none of them is accepted. */
  let batchFault: string | undefined;
  if (config.endpoint === "batch") {
    // Only for authentication, done above; never stored, so its type matters no more.
    delete body.writeKey;
    // As for each message's own fields: null stands for absent (SDKs serialise unset fields so).
    for (const key in body) {
      if (body[key] === null) delete body[key];
      else body[key] = checkableField(key, body[key]); // as judge() does for a message's fields
    }
    if (!Array.isArray(body.batch)) throw errors.invalidBody("Invalid batch body: a batch body needs a `batch` array of messages");
    if (body.batch.length > limits.batchItems) throw errors.tooManyBatchItems(body.batch.length, limits.batchItems);
    // A batch's context or integrations of another type than the spec's is every item's field: as
    // for an item's own (ADR 2), 200 and not accepted. A 400 would tell the SDK to drop the batch
    // too, but the spec allows 400 for invalid JSON and size only.
    if (validateBatchBody(body)) batch = { context: body.context, integrations: body.integrations, sentAt: body.sentAt };
    else batchFault = describeErrors(validateBatchBody.errors).join("; ");
    items = body.batch as unknown[];
  } else {
    items = [body];
  }
  // Only a body deeper than MAX_JSON_DEPTH can hold a message too deep to accept; the check on
  // its text is cheap, and each item is walked once only when it fails.
  const deep = jsonDepthExceeds(text, MAX_JSON_DEPTH) ? tooDeep(items, batch) : undefined;
  // Only a body larger than the item limit can hold an item over it. An item too deep to
  // serialise is not measured: it is not accepted below.
  if (isBatch && raw.length > limits.itemBytes) {
    items.forEach((item, index) => {
      if (deep?.items.has(item)) return;
      if (Buffer.byteLength(JSON.stringify(item) ?? "") > limits.itemBytes) throw errors.batchItemTooLarge(index, limits.itemBytes);
    });
  }

  const notAccepted = (reason: RejectReason, detail: string, item: unknown) => {
    state.metrics.countMessages(sourceId, "not_accepted", reason);
    const messageId = (item as { messageId?: unknown } | null)?.messageId;
    state.activity?.notAccepted({ source: sourceId, reason, detail, ...(typeof messageId === "string" ? { messageId } : {}) });
    const held = state.repeatedLines.pass(`not accepted ${sourceId} ${reason}`);
    if (held !== undefined) request.log.info({ reqId: request.id, source: sourceId, reason, detail, messageId, moreLikeThisSinceLastLine: held }, "message not accepted");
  };

  const receivedAt = new Date();
  const accepted: PreparedMessage[] = [];
  let storedBytes = 0;
  // A batch's context and integrations go into every item: each may grow by their size.
  const batchFields = batch ? Math.min(BATCH_FIELDS_ALLOWANCE, Buffer.byteLength(JSON.stringify({ context: batch.context, integrations: batch.integrations }))) : 0;
  const storedLimit = limit + items.length * ENRICHMENT_ALLOWANCE + Math.min(items.length * batchFields, BATCH_FIELDS_COPIES);
  for (const [index, item] of items.entries()) {
    // Before anything walks or serialises it (judge describes an unknown type, enrich copies).
    if (deep?.items.has(item)) {
      notAccepted("nested_too_deep", `message is nested deeper than ${MAX_JSON_DEPTH} levels`, item);
      continue;
    }
    if (batchFault !== undefined) {
      notAccepted("invalid_field", `the batch's own fields: ${batchFault}`, item);
      continue;
    }
    const verdict = judge(item, config.type);
    if (!verdict.accepted) {
      notAccepted(verdict.reason, verdict.detail, item);
      continue;
    }
    if (deep?.batchLevel) {
      notAccepted("nested_too_deep", `message is nested deeper than ${MAX_JSON_DEPTH} levels once the batch's context is merged in`, item);
      continue;
    }
    const message = enrich(verdict.message, verdict.type, { receivedAt, ip: () => clientIp(request.ip), batch });
    // Serialised once: these bytes are what is stored and, later, signed and delivered.
    const payload = Buffer.from(JSON.stringify(message));
    // A batch's context is merged into every item, so what is stored is bounded again here.
    if (payload.length > limits.itemBytes + ENRICHMENT_ALLOWANCE + batchFields) {
      throw batch ? errors.batchItemTooLarge(index, limits.itemBytes, "after merging the batch context") : errors.requestTooLarge(limits.singleBytes);
    }
    storedBytes += payload.length;
    // Checked as it grows (see BATCH_FIELDS_COPIES).
    if (batch && storedBytes > storedLimit) throw errors.batchTooLarge(limit, `after merging the batch context (at item ${index})`);
    accepted.push({ message, payload });
  }

  if (accepted.length > 0) {
    // Counted only now: a request refused for its size, or a message not accepted, stores nothing
    // and must not use up the source's allowance.
    const waitSeconds = state.rateLimits.take(source, sourceId, accepted.length);
    if (waitSeconds !== undefined) {
      state.metrics.countMessages(sourceId, "failed", "rate_limited", accepted.length);
      const held = state.repeatedLines.pass(`rate limited ${sourceId}`);
      if (held !== undefined) {
        request.log.warn({ reqId: request.id, source: sourceId, messages: accepted.length, messagesPerSecond: source.rateLimit!.perSecond, retryAfter: waitSeconds, moreLikeThisSinceLastLine: held }, "source over its rate limit");
      }
      throw errors.rateLimited(waitSeconds, source.rateLimit!.perSecond);
    }
    const result = await state.publisher.publish(source, accepted);
    let stored = 0;
    let confirmed = 0;
    // forEach skips the holes a failure leaves: the messages JetStream did not confirm.
    result.outcomes.forEach((outcome, i) => {
      confirmed++;
      if (outcome === "stored") stored++;
      else notAccepted("duplicate_message_id", "messageId already seen for this source", accepted[i]!.message);
    });
    if (stored > 0) state.metrics.countMessages(sourceId, "accepted", "", stored);
    // Duplicates and what JetStream did not confirm (the SDK sends those again) take no allowance.
    if (source.rateLimit) state.rateLimits.giveBack(sourceId, accepted.length - stored);
    if (!result.ok) {
      state.metrics.countMessages(sourceId, "failed", result.error.code, accepted.length - confirmed);
      throw result.error;
    }
  }
  return { success: true };
}

/**
 * What of a request is nested deeper than MAX_JSON_DEPTH: its items that are themselves, and
 * whether the batch's context or integrations are (merged into every item one level down, they
 * make each too deep).
 */
function tooDeep(items: unknown[], batch: BatchDefaults | undefined): { items: Set<unknown>; batchLevel: boolean } {
  return {
    items: new Set(items.filter((item) => nestedDeeperThan(item, MAX_JSON_DEPTH))),
    batchLevel: batch !== undefined && (nestedDeeperThan(batch.context, MAX_JSON_DEPTH - 1) || nestedDeeperThan(batch.integrations, MAX_JSON_DEPTH - 1)),
  };
}

/** An IPv4 address and a port, or a bracketed IPv6 address and a port: what clientIp takes the address of. */
const WITH_PORT = /^(?:(\d{1,3}(?:\.\d{1,3}){3})|\[([0-9a-f.]*:[0-9a-f:.]*)\]):\d{1,5}$/i;

/**
 * The client's address as SDKs and Segment write it: an IPv4 client of a dual-stack listener
 * (ingest listens on "::") is seen as "::ffff:203.0.113.7", stored as "203.0.113.7". A trusted
 * proxy's X-Forwarded-For entry with a port ("203.0.113.7:51234", as Azure Application Gateway
 * writes it, or "[2001:db8::1]:443") is the address without it (found by a proxy review: no
 * context.ip). None when the entry held no address (found by a review: "garbage" was stored).
 */
export function clientIp(ip: string): string | undefined {
  const address = ip.length <= 22 && /^::ffff:\d{1,3}(?:\.\d{1,3}){3}$/i.test(ip) ? ip.slice(7) : ip;
  if (isIP(address) !== 0) return address;
  const withPort = WITH_PORT.exec(ip);
  return withPort ? clientIp(withPort[1] ?? withPort[2]!) : undefined;
}
