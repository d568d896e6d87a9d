// Stores accepted messages in TRACKHOOK_EVENTS. A request is answered 200 only after every one of
// its messages has a PubAck; anything else is a 503 so the SDK retries (safe: Nats-Msg-Id dedup).
//
// Why not js.publish(): a JetStream publish is a core request to the stream's subject with a
// Nats-Msg-Id header, answered by a PubAck. @nats-io/jetstream 3.4 does
// it with one request object, timer and (on every success) a stack-captured Error per message,
// which the benchmark measured at ~18 µs of CPU per message, more than the rest of the ingest.
// Here every message of a request is published with a reply subject on one shared subscription,
// one timer covers the request, and the publishes of one event-loop turn leave in one write.
import { setTimeout as sleep } from "node:timers/promises";
import { createInbox, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import type { CompiledSource, StoredMessage } from "../../schema/mod.ts";
import { TurnBatch, eventMsgId, eventSubject, inboxPrefixOf, msgIdHeader, natsConnectedWithin, natsDisconnectedForMs } from "../nats/mod.ts";
import { errors, type IngestError } from "./errors.ts";
import type { IngestMetrics } from "./metrics.ts";

export type PublishOutcome = "stored" | "duplicate";

/**
 * How a request's publishes ended. A failure (answered 503) may come after JetStream stored some
 * of a batch: `outcomes` then holds what was confirmed before it (undefined for the rest), so
 * that those are counted as stored.
 */
export type PublishResult =
  | { ok: true; outcomes: PublishOutcome[] }
  /** `noResponders`: nothing took the messages (JetStream not up yet, no stream leader), so none was stored. */
  | { ok: false; error: IngestError; outcomes: Array<PublishOutcome | undefined>; noResponders?: true };

/** A message ready to store: the enriched message and its JSON bytes. */
export interface PreparedMessage {
  message: StoredMessage;
  payload: Uint8Array;
}

export interface PublisherOptions {
  timeoutMs: number;
  retryAfterSeconds: number;
}

/** JetStream's error code for a stream at its limits with discard: new. */
const STREAM_STORE_FAILED = 10077;
/**
 * While NATS is away, requests wait for it holding at most this many message bytes in all; the
 * rest are answered 503 at once. Bounds the memory an outage under load can take (objects and
 * sockets come to a few times the bytes).
 */
const MAX_HELD_BYTES = 16 * 1024 * 1024;
/** A request held until a reconnect keeps at least this long of its publish timeout for the PubAcks. */
const PUBACK_AFTER_RECONNECT_MS = 1_000;
/** After a reconnect, a "no responders" reply is tried again this much later, within the wait. */
const NO_RESPONDERS_RETRY_MS = 250;
/** JetStream's "insufficient resources": the server's own storage limit reached. */
const INSUFFICIENT_RESOURCES = 10023;

interface Request {
  outcomes: PublishOutcome[];
  /** Failed by a no-responders reply. */
  noResponders?: true;
  remaining: number;
  tokens: string[];
  timer: NodeJS.Timeout;
  resolve(result: PublishResult): void;
}

interface Pending {
  request: Request;
  index: number;
  startedAt: number;
}

interface PubAckReply {
  stream?: string;
  seq?: number;
  duplicate?: boolean;
  error?: { code: number; err_code?: number; description?: string };
}

export class EventPublisher {
  readonly #nc: NatsConnection;
  readonly #options: PublisherOptions;
  readonly #metrics: IngestMetrics;
  readonly #inbox: string;
  readonly #pending = new Map<string, Pending>();
  readonly #subscription: Subscription;
  #nextToken = 0;
  readonly #turn = new TurnBatch();
  /** Bytes of the messages of requests waiting for NATS to be back. */
  #heldBytes = 0;
  /** Aborted at shutdown: a request waiting for NATS is answered at once. */
  readonly #shutdown = new AbortController();

  constructor(nc: NatsConnection, options: PublisherOptions, metrics: IngestMetrics) {
    this.#nc = nc;
    this.#options = options;
    this.#metrics = metrics;
    // The connection's own prefix: NATS permissions may allow this user no other inbox.
    this.#inbox = `${createInbox(inboxPrefixOf(nc))}.`;
    this.#subscription = nc.subscribe(`${this.#inbox}*`, { callback: (err, msg) => err ? undefined : this.#onReply(msg) });
  }

  /** Stores all messages; resolves with each one's outcome, or with the 503 that failed them. Never rejects. */
  publish(source: CompiledSource, messages: PreparedMessage[]): Promise<PublishResult> {
    if (natsDisconnectedForMs(this.#nc) > 0) return this.#publishOnceBack(source, messages);
    return this.#publishNow(source, messages, this.#options.timeoutMs);
  }

  /**
   * NATS away: the request waits for it, within its publish timeout, rather than being answered
   * 503 at once. Several SDKs give up on a batch after a number of tries, not a time (Go after
   * 10, analytics.js after 6, the classic Node SDK after 4, all ignoring a 503's Retry-After),
   * and answered at once they spent them within seconds of an outage (found by a review of SDKs
   * through faults: a 60 s NATS restart lost 593 of 2,179 of Go's events, where
   * @segment/analytics-node and Python lost none). Held here, bounded, rather than handed to the
   * disconnected client, whose buffer nothing bounds.
   */
  async #publishOnceBack(source: CompiledSource, messages: PreparedMessage[]): Promise<PublishResult> {
    const unavailable = (why: string): PublishResult => ({ ok: false, error: errors.storageUnavailable(this.#options.retryAfterSeconds, new Error(why)), outcomes: new Array(messages.length) });
    const holdMs = this.#options.timeoutMs - PUBACK_AFTER_RECONNECT_MS;
    const bytes = messages.reduce((sum, { payload }) => sum + payload.length, 0);
    if (holdMs <= 0) return unavailable("NATS disconnected; reconnecting");
    if (this.#heldBytes + bytes > MAX_HELD_BYTES) return unavailable("NATS disconnected; reconnecting (too much waits for it already)");
    const startedAt = performance.now();
    this.#heldBytes += bytes;
    let back: boolean;
    try {
      back = await natsConnectedWithin(this.#nc, holdMs, this.#shutdown.signal);
    } finally {
      this.#heldBytes -= bytes;
    }
    if (!back) return unavailable(this.#shutdown.signal.aborted ? "NATS disconnected; reconnecting (stopping: not waiting for it)" : `NATS disconnected; reconnecting (not back within ${holdMs} ms)`);
    // Back, JetStream may not answer yet (a restarted server's streams loading, a cluster electing
    // the stream's leader): "no responders" is tried again while the wait lasts (found by a review).
    const deadline = startedAt + holdMs;
    for (;;) {
      const result = await this.#publishNow(source, messages, this.#options.timeoutMs - (performance.now() - startedAt));
      if (result.ok || !result.noResponders || this.#shutdown.signal.aborted || performance.now() + NO_RESPONDERS_RETRY_MS > deadline) return result;
      await sleep(NO_RESPONDERS_RETRY_MS);
    }
  }

  #publishNow(source: CompiledSource, messages: PreparedMessage[], timeoutMs: number): Promise<PublishResult> {
    return new Promise((resolve) => {
      const request: Request = {
        outcomes: new Array(messages.length),
        remaining: messages.length,
        tokens: [],
        timer: setTimeout(() => this.#fail(request, errors.storageUnavailable(this.#options.retryAfterSeconds, new Error("PubAck timeout"))), timeoutMs),
        resolve,
      };
      this.#turn.add(() => {
        const startedAt = performance.now();
        try {
          for (let index = 0; index < messages.length; index++) {
            const { message, payload } = messages[index]!;
            const token = (this.#nextToken++).toString(36);
            request.tokens.push(token);
            this.#pending.set(token, { request, index, startedAt });
            // No Nats-Expected-Stream: streams cannot share subjects, so only TRACKHOOK_EVENTS can
            // store this one, and the header would be stored with every message.
            const headers = msgIdHeader(eventMsgId(source.namespace, source.name, message.messageId));
            this.#nc.publish(eventSubject(source.namespace, source.name, message.type), payload, { reply: this.#inbox + token, headers });
          }
        } catch (err) {
          // A closed connection throws at once.
          this.#fail(request, errors.storageUnavailable(this.#options.retryAfterSeconds, err));
        }
      });
    });
  }

  #onReply(msg: Msg): void {
    const token = msg.subject.slice(this.#inbox.length);
    const pending = this.#pending.get(token);
    if (!pending) return; // the request already failed or timed out
    this.#pending.delete(token);
    const { request, index, startedAt } = pending;

    let ack: PubAckReply | undefined;
    if (msg.data.length > 0) {
      try {
        ack = msg.json<PubAckReply>();
      } catch {
        ack = undefined;
      }
    }
    if (!ack || ack.error || typeof ack.seq !== "number") {
      // No body: a status reply such as 503 "no responders" (JetStream not available).
      // 503 comes with no description: nothing answers for the stream (no JetStream, or in a
      // cluster no leader: no quorum, or an election under way).
      const status = msg.headers?.code;
      const description = ack?.error?.description ?? (
        status === 503 ? "status 503, no responders: no stream took the message (the stream is missing, JetStream is unavailable, or in a cluster the stream has no leader)"
        : status ? `status ${status} ${msg.headers?.description ?? ""}`.trim()
        : "empty reply");
      const cause = new Error(`JetStream refused the message: ${description}`);
      // Full: the stream at its max_bytes, or nats-server out of JetStream storage (its
      // max_file_store, shared by every stream: a review filled it with another stream).
      const full = ack?.error?.err_code === STREAM_STORE_FAILED || ack?.error?.err_code === INSUFFICIENT_RESOURCES;
      if (!ack && status === 503) request.noResponders = true;
      this.#fail(request, full ? errors.storageFull(this.#options.retryAfterSeconds, cause) : errors.storageUnavailable(this.#options.retryAfterSeconds, cause));
      return;
    }
    this.#metrics.publishDuration.observe((performance.now() - startedAt) / 1000);
    request.outcomes[index] = ack.duplicate ? "duplicate" : "stored";
    if (--request.remaining === 0) {
      clearTimeout(request.timer);
      request.resolve({ ok: true, outcomes: request.outcomes });
    }
  }

  #fail(request: Request, err: IngestError): void {
    if (request.remaining <= 0) return;
    request.remaining = -1;
    clearTimeout(request.timer);
    for (const token of request.tokens) this.#pending.delete(token);
    request.resolve({ ok: false, error: err, outcomes: request.outcomes, ...(request.noResponders ? { noResponders: true as const } : {}) });
  }

  /** Requests waiting for NATS to be back are answered 503 at once, and new ones are not held: the process is stopping. */
  stopHolding(): void {
    this.#shutdown.abort();
  }

  close(): void {
    this.stopHolding();
    this.#subscription.unsubscribe();
  }
}
