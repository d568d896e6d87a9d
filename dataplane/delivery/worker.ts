// Delivers one destination's messages: pulls from its consumer, POSTs each message to all URLs in
// parallel, records every attempt, and then acks (delivered), naks with a delay (retry) or stores
// a dead letter and acks (permanent failure, or the retry window is over). A message is acked only
// after it was delivered or its dead letter is stored.
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, type ConsumerMessages, type JetStreamClient, type JetStreamManager, type JsMsg } from "@nats-io/jetstream";
import type { CompiledDestination } from "../../schema/mod.ts";
import { isoTimestamp } from "../iso-time.ts";
import { parseJson } from "../json.ts";
import type { Logger } from "../logging.ts";
import type { TurnBatch } from "../nats/mod.ts";
import { DEAD_LETTER_HEADERS, EVENTS_STREAM, attemptsSubject, consumerName, dlqSubject, replaySubject, sourceOfEventSubject } from "../nats/mod.ts";
import { type AttemptOutcome, backoffMs, combine, nextRoundDelayMs } from "./outcome.ts";
import { signingKeys, standardWebhookHeaders, webhookBody, SIGNATURE_HEADER, xSignature, type DeliverableMessage, type SigningKeys } from "./payload.ts";
import { routesTo } from "./routing.ts";
import type { DeadLetterFailure, DeadLetterReason, DeliveryMetrics, PausedUrl } from "./metrics.ts";
import { ConsumerWatch, type ConsumerPosition } from "./consumer-watch.ts";
import type { SlotShare } from "./limit.ts";
import type { SendRequest, SendResult } from "./sender.ts";
import { UrlPauses } from "./url-pause.ts";
import { deadLetterOptions } from "./dead-letter.ts";
import { KeyedLogInterval, LogInterval } from "../telemetry/mod.ts";

/** What the worker needs of an HTTP sender (dataplane/delivery/sender.ts). */
export interface WebhookSending {
  send(request: SendRequest): Promise<SendResult>;
}

/** The header receivers can use to drop a retried duplicate: the same for every attempt of a message. */
export const DELIVERY_ID_HEADER = "X-Delivery-Id";

/** A destination's own headers, names as configured (the sender replaces its User-Agent with one of them). */
function customHeaders(destination: CompiledDestination): Record<string, string> {
  return Object.fromEntries(destination.headers.map(({ name, value }) => [name, value]));
}

/**
 * What a change of each field of a destination asks of its running worker. Every field must be
 * here (the compiler says so when one is added), so a new knob is a decision, not a silent
 * restart:
 * - "none": createdAt and deliveringSince only say where a consumer starts when it is made; a
 *   change must not restart the worker and lose its URL pauses and round state.
 * - "live": DestinationWorker.applyLive takes it in place, for the next requests.
 * - "restart": the worker is replaced (a new consumer filter, new URL pauses, new limits).
 */
const FIELD_CHANGE = {
  createdAt: "none",
  deliveringSince: "none",
  sharedSecret: "live",
  additionalSharedSecrets: "live",
  headers: "live",
  standardWebhooks: "live",
  namespace: "restart",
  name: "restart",
  enabled: "restart",
  sources: "restart",
  urls: "restart",
  timeoutMs: "restart",
  retryWindowMs: "restart",
  maxInFlight: "restart",
} as const satisfies Record<keyof CompiledDestination, "none" | "live" | "restart">;

function destinationKeys({ sharedSecret, additionalSharedSecrets }: CompiledDestination): SigningKeys | undefined {
  return sharedSecret ? signingKeys(sharedSecret, additionalSharedSecrets) : undefined;
}

/** How a destination's new config differs from the one its worker runs with: the largest change of any field. */
export function changeOf(next: CompiledDestination, running: CompiledDestination): "none" | "live" | "restart" {
  let change: "none" | "live" | "restart" = "none";
  for (const field of Object.keys(FIELD_CHANGE) as Array<keyof CompiledDestination>) {
    if (JSON.stringify(next[field]) === JSON.stringify(running[field])) continue;
    if (FIELD_CHANGE[field] === "restart") return "restart";
    if (FIELD_CHANGE[field] === "live") change = "live";
  }
  return change;
}

/** A message's messageId for a log line, if its body has one (it may not be JSON at all). */
function messageIdOf(m: JsMsg): string | undefined {
  try {
    const id = (m.json<{ messageId?: unknown }>() as { messageId?: unknown } | null)?.messageId;
    return typeof id === "string" ? id : undefined;
  } catch {
    return undefined;
  }
}

/** A stored message delivery can send: a JSON object with a messageId and a type. */
function isDeliverable(value: unknown): value is DeliverableMessage {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return false;
  const { messageId, type } = value as { messageId?: unknown; type?: unknown };
  return typeof messageId === "string" && typeof type === "string";
}

/**
 * A URL as attempt records and logs show it: no credentials, no query string, and of the path
 * only its first segment, and that only when it reads as a word. Tokens live in all three: Slack,
 * Discord and Zapier put theirs in the path (`hooks.slack.com/services/T…/B…/<token>`), Make and
 * webhook.site in its only segment (`hook.eu1.make.com/<token>`).
 */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    const [first, ...more] = parsed.pathname.split("/").filter(Boolean);
    const shown = first === undefined ? "/" : WORD_SEGMENT.test(first) ? `/${first}` : "/…";
    const path = more.length > 0 && shown !== "/…" ? `${shown}/…` : shown;
    return `${parsed.origin}${path}${parsed.search ? "?…" : ""}`;
  } catch {
    return "(invalid URL)";
  }
}

/**
 * A path segment shown as is: lowercase letters and `.`, `_`, `-`, up to 32 (`hooks`, `segment`,
 * `webhook-in`), or up to 8 with digits too (`v1`, `api2`). A token has capitals, or digits and
 * length (Make's are 32 lowercase letters and digits, webhook.site's UUIDs).
 */
const WORD_SEGMENT = /^(?:[a-z][a-z._-]{0,31}|[a-z0-9][a-z0-9._-]{0,7})$/;

export interface AttemptRecord {
  destination: string;
  url: string;
  messageId: string;
  streamSequence: number;
  attempt: number;
  outcome: AttemptOutcome["kind"];
  status?: number;
  error?: string;
  latencyMs: number;
  response?: string;
  /** What the HTTP client said of an attempt that got no readable answer. */
  detail?: string;
  at: string;
  /** The message came back from the dead-letter queue (`trackhook replay`); its attempts count anew. */
  replay?: true;
}

export interface DestinationWorkerDeps {
  nc: NatsConnection;
  sender: WebhookSending;
  log: Logger;
  metrics: DeliveryMetrics;
  /** This destination's share of the process's delivery slots (closed when the worker stops). */
  share: SlotShare;
  /** Acks, naks and attempt records leave with the turn's other NATS traffic. */
  turn: TurnBatch;
  /** Messages pulled ahead of the slots they wait for (pullAhead()); the destination's maxInFlight at most. */
  pullAhead?: number;
  /** The events stream's max_age (Infinity for none): a message must be dead-lettered before it expires. */
  streamMaxAgeMs?: number;
  /** How often the consumer is checked for (ConsumerWatch; tests shorten it). */
  consumerCheckMs?: number;
  /** When a message whose dead letter was refused comes back (tests shorten it). */
  deadLetterRetryMs?: number;
  /** Checks the consumer with it; without one, the consumer is not watched. */
  jsm?: JetStreamManager;
  /** Hears (once) that the consumer is gone from under this worker. */
  onConsumerLost?: (last: ConsumerPosition | undefined) => void;
  /** Hears each URL's pause begin and end, as the log says them (dev's activity lines). */
  activity?: DeliveryActivity;
}

/**
 * What a watcher hears of a destination's URL pauses: the silence after a URL's failures is a
 * pause, not a stuck delivery, and it ends with a probe. Attempts, dead letters and deliveries
 * are in the streams.
 */
export interface DeliveryActivity {
  /** `error`: what the URL's last attempt got, when it got no answer. */
  urlPaused(event: { destination: string; url: string; reason: "unreachable" | "retry_after"; forMs: number; error?: string }): void;
  urlResumed(event: { destination: string; url: string }): void;
}

/**
 * The retry window in force: the destination's, unless the events stream would drop its messages
 * first. Then they are dead-lettered at 90% of the stream's max_age, where `replay` can still
 * reach them, instead of vanishing from the stream while still being retried.
 */
export function retryWindowInForceMs(retryWindowMs: number, streamMaxAgeMs = Infinity): number {
  return Math.min(retryWindowMs, Math.floor(streamMaxAgeMs * 0.9));
}

/** Messages a worker pulls ahead at most. */
const MAX_PULL_AHEAD = 256;
/** ...and at least: fewer would make pulling, not the slots, what bounds a destination busy alone. */
const MIN_PULL_AHEAD = 16;

/**
 * How many messages each destination's worker pulls ahead of its slots. A pulled message's
 * ack_wait (timeout + 30 s) runs while it waits in the buffer for a slot; past it, NATS delivers
 * it again and both copies are sent. With many destinations each has only a few slots
 * (processMax / tenants / the tenant's N, see limit.ts): pulling maxInFlight each (300 × 100 for 1,000 slots) made messages wait
 * longer than ack_wait behind slow receivers, and ~20% arrived twice. Twice a fair share keeps the
 * whole process's buffer to about twice its slots.
 */
export function pullAhead(processMaxInFlight: number, tenants: number, destinationsOfTenant: number): number {
  const fair = Math.ceil((2 * processMaxInFlight) / Math.max(1, tenants) / Math.max(1, destinationsOfTenant));
  return Math.max(MIN_PULL_AHEAD, Math.min(MAX_PULL_AHEAD, fair));
}

/** The last round of a message comes this long before its retry window closes, at the latest. */
const FINAL_ROUND_MARGIN_MS = 1_000;
/** Idle heartbeats of a worker's pull: two missed (5 s) and it pulls again (see start()). */
const IDLE_HEARTBEAT_MS = 2_500;
/**
 * How long a pull waits at the server, and nats.js's pause between checks of a consumer that does
 * not answer after missed heartbeats (it backs off by `expires`, 30 s by default): with the
 * default, killing the node that led a consumer stopped its delivery for 35-45 s.
 */
const PULL_EXPIRES_MS = 5_000;
/** What a round that sent nothing (every URL pausing) came to, for its metrics and dead letter. */
const URL_PAUSED: AttemptOutcome = { kind: "retry", error: "url_paused" };
/** A last round is not scheduled sooner than this: it would retry URLs that just failed. */
const MIN_FINAL_ROUND_DELAY_MS = 1_000;
/** How often #rounds is swept of entries whose message finished elsewhere (another replica). */
const ROUND_SWEEP_MS = 60_000;

/** At most one line of a kind (timed out, dead-lettered, dead letter refused) per destination this often. */
const LINE_INTERVAL_MS = 10_000;
const RETRY_AFTER_LOG_INTERVAL_MS = 60_000;
/** A message whose dead letter was refused comes back this much later. */
const DEAD_LETTER_RETRY_MS = 60_000;
/** A message delivery throws on is tried this often, this far apart, before it is dead-lettered. */
const UNEXPECTED_FAILURES_MAX = 3;
const UNEXPECTED_FAILURE_RETRY_MS = 2_000;
/** Why JetStream did not store a dead letter, from its error. */
function deadLetterFailureOf(message: string): DeadLetterFailure {
  // "maximum messages per subject exceeded": the destination's own cap (--dead-letters-per-destination).
  if (/per subject/i.test(message)) return "dead_letter_destination_full";
  return /maximum (bytes|messages)/i.test(message) ? "dead_letter_stream_full" : "dead_letter_not_stored";
}

/** What the log says of a refused dead letter, by why. */
const DEAD_LETTER_REFUSED: Record<DeadLetterFailure, string> = {
  dead_letter_destination_full:
    "dead letter refused: this destination has as many dead letters as it may keep (--dead-letters-per-destination of deliver); the message is sent once more and dead-lettered again in a minute, and is lost if the events stream drops it first: replay or purge its dead letters, or raise the limit",
  dead_letter_stream_full:
    "dead letter refused: TRACKHOOK_DLQ is full (--stream-max-bytes of deliver); the message is sent once more and dead-lettered again in a minute, and is lost if the events stream drops it first: make room (replay or purge dead letters) or raise the limit",
  dead_letter_not_stored: "dead letter not stored; the message is sent once more and dead-lettered again in a minute",
};

/** Attempt records per NATS message: ~300 bytes each (up to ~1 KB with a response), far below max_payload. */
const RECORDS_PER_MESSAGE = 100;

interface RoundState {
  dead: Set<string>;
  /**
   * Rounds that sent nothing, every URL pausing: they take no step of the backoff. Known to this
   * replica only (another's count as attempts); backoffMs' bound on the time waited covers those.
   */
  skipped: number;
  /** The last failed outcome, for a dead letter's headers when a round sends nothing. */
  last?: AttemptOutcome;
  /** The end of the message's retry window: past it the entry is of no use (see #sweepRounds). */
  expiresAt: number;
}
const newRoundState = (expiresAt: number): RoundState => ({ dead: new Set(), skipped: 0, expiresAt });

/** The log line of a URL's pause beginning, by what paused it. */
const PAUSE_LINES = {
  retry_after: "webhook URL asked for a pause (Retry-After): no message is sent to it until it ends",
  certificate: "webhook URL's certificate fails verification: no message is sent to it for a while, then one tries it again (the destination's other URLs go on)",
  unreachable: "webhook URL is not answering: no message is sent to it for a while, then one tries it again (the destination's other URLs go on)",
  proxy: "the egress proxy failed the requests to this webhook URL (down, refusing it, or asking for credentials): no message is sent to it for a while, then one tries it again",
} as const;

export class DestinationWorker {
  #destination: CompiledDestination;
  readonly #js: JetStreamClient;
  readonly #sender: WebhookSending;
  readonly #log: Logger;
  readonly #activity: DeliveryActivity | undefined;
  readonly #metrics: DeliveryMetrics;
  readonly #label: string;
  /** The events stream's max_age: when a message not yet acked is gone for good. */
  #streamMaxAgeMs: number;
  readonly #sources = new Map<string, string>();
  /** URLs that no message is sent to for a while (Retry-After, or not answering). */
  readonly #pauses = new UrlPauses();
  readonly #share: SlotShare;
  readonly #nc: NatsConnection;
  readonly #turn: TurnBatch;
  readonly #pullAhead: number;
  readonly #inFlight = new Set<Promise<void>>();
  /**
   * Per stream sequence, what later rounds of a message must respect: URLs that failed for good
   * (not tried again), the last failure, and the rounds a pause held back. In memory only, and
   * only for messages that have any. (A URL's pause is kept for all messages, in #pauses.)
   */
  readonly #rounds = new Map<number, RoundState>();
  #roundsSweptAt = 0;
  /** One "webhook timed out" line per LINE_INTERVAL_MS at most (see #logTimeout). */
  readonly #timeoutLog = new LogInterval(LINE_INTERVAL_MS);
  /** One "moved to the dead-letter queue" line per reason per LINE_INTERVAL_MS at most. */
  readonly #deadLetterLog = new KeyedLogInterval(LINE_INTERVAL_MS);
  readonly #retryAfterLog = new KeyedLogInterval(RETRY_AFTER_LOG_INTERVAL_MS);
  readonly #deadLetterRefusedLog = new LogInterval(LINE_INTERVAL_MS);
  readonly #deadLetterRetryMs: number;
  /** When the dead-letter stream last refused one of this destination's messages. */
  #deadLetterRefusedAt = -Infinity;
  readonly #attemptsSubject: string;
  /** Attempt records of this turn not yet published (see #publishRecords). */
  #records: string[] = [];
  readonly #replaySubject: string;
  /** The destination's own headers, names as configured (customHeaders). */
  #customHeaders: Record<string, string>;
  /** The shared secret's keys, made once: a string key is converted again on every signature. */
  #signingKeys: SigningKeys | undefined;
  /** The destination's URLs as attempt records show them, redacted once. */
  readonly #redactedUrls: Map<string, string>;
  #messages: ConsumerMessages | undefined;
  #watch: ConsumerWatch | undefined;
  /** What start() watches the consumer with (deps.jsm and deps.onConsumerLost), if anything. */
  readonly #watchWith: { jsm: JetStreamManager; lost: (last: ConsumerPosition | undefined) => void; checkMs: number | undefined } | undefined;
  #stopping = false;
  #loop: Promise<void> | undefined;

  constructor(destination: CompiledDestination, deps: DestinationWorkerDeps) {
    this.#destination = destination;
    this.#nc = deps.nc;
    this.#js = jetstream(deps.nc);
    this.#sender = deps.sender;
    this.#metrics = deps.metrics;
    this.#share = deps.share;
    this.#turn = deps.turn;
    this.#pullAhead = deps.pullAhead ?? MAX_PULL_AHEAD;
    this.#label = `${destination.namespace}/${destination.name}`;
    this.#streamMaxAgeMs = deps.streamMaxAgeMs ?? Infinity;
    this.#attemptsSubject = attemptsSubject(destination.namespace, destination.name);
    this.#replaySubject = replaySubject(destination.namespace, destination.name);
    this.#customHeaders = customHeaders(destination);
    this.#redactedUrls = new Map(destination.urls.map((url) => [url, redactUrl(url)]));
    this.#signingKeys = destinationKeys(destination);
    this.#log = deps.log.child({ destination: this.#label });
    this.#activity = deps.activity;
    this.#deadLetterRetryMs = deps.deadLetterRetryMs ?? DEAD_LETTER_RETRY_MS;
    this.#watchWith = deps.jsm && deps.onConsumerLost ? { jsm: deps.jsm, lost: deps.onConsumerLost, checkMs: deps.consumerCheckMs } : undefined;
  }

  async start(): Promise<void> {
    const consumer = await this.#js.consumers.get(EVENTS_STREAM, consumerName(this.#destination.namespace, this.#destination.name));
    // Buffered messages are already delivered (their ack_wait runs): see pullAhead().
    const messages = await consumer.consume({
      max_messages: Math.min(this.#destination.maxInFlight, this.#pullAhead),
      // A pull waiting at a consumer's leader is lost when the leader changes (a NATS node
      // restarted, a stepdown), and nats.js pulls again only after two missed heartbeats: with
      // its default (15 s) every leader change stopped delivery for 30-45 s, silently.
      idle_heartbeat: IDLE_HEARTBEAT_MS,
      expires: PULL_EXPIRES_MS,
    });
    this.#messages = messages;
    this.#loop = (async () => {
      for await (const m of messages) {
        // Waiting for a slot of this destination's share pauses its pulling: backpressure
        // instead of an unbounded queue. (A free slot is taken at once: awaiting an
        // already-resolved promise costs a turn of the microtask queue per message.)
        let slot = false;
        if (!this.#stopping) {
          if (!this.#share.tryAcquire()) await this.#share.acquire();
          slot = true;
        }
        // Messages buffered (or waiting for a slot) when stop() began go back to the server: a
        // disabled or removed destination must not be sent anything more, and shutdown should
        // not wait for them.
        if (this.#stopping) {
          if (slot) this.#share.release();
          m.nak();
          continue;
        }
        const work = this.#handle(m)
          .catch((err: unknown) => this.#failedUnexpectedly(m, err))
          .finally(() => this.#share.release());
        this.#inFlight.add(work);
        void work.finally(() => this.#inFlight.delete(work));
      }
    })().catch((err: unknown) => {
      // The connection drained or closed under the loop: the process is stopping, and the
      // messages in flight finish as they can. Anything else is a fault to fail on.
      if (this.#nc.isDraining() || this.#nc.isClosed()) return;
      throw err;
    });
    this.#followPulls(messages);
    const watchWith = this.#watchWith;
    if (watchWith) {
      this.#watch = new ConsumerWatch(watchWith.jsm, consumerName(this.#destination.namespace, this.#destination.name), watchWith.lost, watchWith.checkMs);
      this.#watch.follow(messages);
    }
  }

  /**
   * Says when the consumer's server stops sending heartbeats (its node lost, an election under
   * way) and when pulling starts again: nats.js recovers by itself, but delivery waits meanwhile,
   * and that wait must not be silent.
   */
  #followPulls(messages: ConsumerMessages): void {
    let quietSince: number | undefined;
    void (async () => {
      for await (const status of messages.status()) {
        if (status.type === "heartbeats_missed" && quietSince === undefined) {
          quietSince = Date.now() - status.count * IDLE_HEARTBEAT_MS;
          this.#log.warn(
            { missedHeartbeats: status.count },
            "no heartbeat from this destination's NATS consumer (its NATS node lost, or its leader being elected): delivery waits until nats.js pulls again",
          );
        } else if (status.type === "next" && quietSince !== undefined) {
          this.#log.info({ quietForMs: Date.now() - quietSince }, "pulling from this destination's NATS consumer again");
          quietSince = undefined;
        }
      }
    })().catch(() => {});
  }

  get destination(): CompiledDestination {
    return this.#destination;
  }

  /**
   * Takes a new shared secret, headers or signing scheme in place (changeOf "live"): a rotated
   * Secret used by many destinations would otherwise restart each worker, and the messages in
   * transit to a closed pull wait out ack_wait (35 s) before anyone sends them.
   */
  applyLive(next: CompiledDestination): void {
    this.#destination = next;
    this.#customHeaders = customHeaders(next);
    this.#signingKeys = destinationKeys(next);
  }

  /** The events stream's max_age is now this (Infinity for none): the retry window follows, from the next round on. */
  streamMaxAgeChanged(streamMaxAgeMs: number): void {
    this.#streamMaxAgeMs = streamMaxAgeMs;
  }

  /** The retry window in force (retryWindowInForceMs). */
  get retryWindowMs(): number {
    return retryWindowInForceMs(this.#destination.retryWindowMs, this.#streamMaxAgeMs);
  }

  /** Past this age (90% of the stream's max_age) a message is not sent even once. */
  get #lastChanceAgeMs(): number {
    return retryWindowInForceMs(Infinity, this.#streamMaxAgeMs);
  }

  /** Where the consumer had got to when last seen (ConsumerWatch), if it was. */
  get lastPosition(): ConsumerPosition | undefined {
    return this.#watch?.last;
  }

  /** Stops pulling and waits for the messages in delivery (SIGTERM drains). */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#watch?.stop();
    await this.#messages?.close();
    await this.#loop;
    await Promise.all(this.#inFlight);
    this.#share.close();
  }

  /**
   * A message #handle threw on: tried again soon, and dead-lettered (invalid_message) once it has
   * failed so a few times. Left to ack_wait and the retry window, a message that always throws
   * held a slot for hours, and enough of them stopped the destination (found by a review: a
   * messageId with a lone surrogate).
   */
  async #failedUnexpectedly(m: JsMsg, err: unknown): Promise<void> {
    const attempts = m.info.deliveryCount;
    const giveUp = attempts >= UNEXPECTED_FAILURES_MAX;
    this.#log.error({ err, seq: m.seq, messageId: messageIdOf(m), deliveries: attempts }, giveUp
      ? "delivery failed unexpectedly again: the message is moved to the dead-letter queue (invalid_message)"
      : "delivery failed unexpectedly; the message is tried again shortly");
    if (!giveUp) {
      this.#turn.add(() => m.nak(UNEXPECTED_FAILURE_RETRY_MS));
      return;
    }
    await this.#deadLetter(m, "invalid_message", attempts);
  }

  async #handle(m: JsMsg): Promise<void> {
    const info = m.info;
    let message: DeliverableMessage | undefined;
    try {
      // Not m.json(): JSON.parse alone may misread an escaped key (see parseJson).
      message = parseJson(m.string(), { exactNumbers: false }) as DeliverableMessage;
    } catch {
      message = undefined;
    }
    if (!isDeliverable(message)) {
      // Nothing can be sent for it, and retrying cannot help: keep it where a person can look.
      await this.#deadLetter(m, "invalid_message", info.deliveryCount);
      return;
    }
    // The retry window counts from when the message was stored, not from the first attempt.
    const storedAt = info.timestampNanos / 1e6;
    const deadline = storedAt + this.retryWindowMs;
    const now = Date.now();
    // Past the window: no more sends once it was tried (redelivered, its dead letter not stored
    // before), nor when the stream is about to drop it. A backlog behind a receiver that fails
    // slowly reaches the consumer only as slots free: sent once each, its oldest messages expired
    // from the stream unseen. Dead-lettered at once instead, the backlog drains at NATS speed.
    // While the dead-letter stream refuses them, though, such messages come back every minute and
    // hold the consumer's slots (ack pending): each is sent once more first, so a receiver that
    // answers again gets them, and the destination's other messages, instead of nothing until
    // someone makes room (found by a review: 0 requests to a receiver back for 150 s).
    const lastChance = now >= deadline && now - this.#deadLetterRefusedAt < 2 * this.#deadLetterRetryMs;
    if (now >= deadline && !lastChance && (info.deliveryCount > 1 || now - storedAt >= this.#lastChanceAgeMs)) {
      await this.#deadLetter(m, "retry_window_exhausted", info.deliveryCount, this.#rounds.get(m.seq)?.last);
      return;
    }
    if (!routesTo(message, this.#destination.name)) {
      this.#metrics.countDelivery(this.#label, "skipped", "integrations");
      this.#turn.add(() => m.ack());
      return;
    }
    // Most messages carry no round state, and most destinations no paused URL: they use the
    // destination's list as it is.
    const round = this.#rounds.get(m.seq);
    let urls = this.#destination.urls;
    if (round || !this.#pauses.empty) {
      urls = urls.filter((url) => !round?.dead.has(url) && this.#pauses.claim(url, now, this.#destination.timeoutMs));
      if (urls.length === 0) {
        // Redelivered before any URL's pause ended (another replica's nak, or a pause of the
        // URL's own): wait on, without an attempt.
        if (lastChance) {
          await this.#deadLetter(m, "retry_window_exhausted", info.deliveryCount, round?.last ?? this.#pauseCause(this.#destination.urls));
          return;
        }
        const held = round ?? newRoundState(deadline);
        held.skipped++;
        this.#rounds.set(m.seq, held);
        this.#sweepRounds(now);
        await this.#retryOrGiveUp(m, held, info.deliveryCount, deadline, undefined);
        return;
      }
    }
    const body = webhookBody(message, m.data);
    const headers = this.#headersFor(m, message, body);
    const sentAt = Date.now();
    const sends = urls.map((url) => this.#sender.send({ pool: this.#label, url, body, headers, timeoutMs: this.#destination.timeoutMs }));
    // One 2xx delivers the message: ack it then, without waiting for slower URLs (which are
    // still awaited below, for their records and so they keep counting against the limits).
    let acked = false;
    for (const send of sends) {
      void send.then((r) => {
        if (r.outcome.kind !== "delivered" || acked) return;
        acked = true;
        this.#metrics.countDelivery(this.#label, "delivered");
        if (message.type === "delete") this.#metrics.countDeleteNotification(this.#label, "delivered");
        this.#turn.add(() => m.ack());
      });
    }
    const results = await Promise.all(sends);

    const attempt = info.deliveryCount;
    this.#record(m, message, attempt, sentAt, results);
    this.#notePauses(results, sentAt);
    const outcome = combine(results.map((r) => r.outcome));
    if (outcome.kind === "delivered") {
      this.#rounds.delete(m.seq);
      return;
    }
    if (lastChance) {
      await this.#deadLetter(m, "retry_window_exhausted", attempt, outcome);
      return;
    }
    await this.#retryOrGiveUp(m, this.#remember(m.seq, round, results, outcome, deadline), attempt, deadline, results);
  }

  /**
   * After a round without a delivery: nak for the next round, or dead-letter when no URL can
   * still succeed within the window. A round that sent something is followed after the backoff
   * of the rounds that did (or later, while every URL is still pausing: nextRoundDelayMs); one
   * that sent nothing comes back when the first URL's pause ends. A round due after the window
   * closes comes just before it instead, unless every URL would still be pausing then.
   */
  async #retryOrGiveUp(m: JsMsg, round: RoundState | undefined, attempt: number, deadline: number, results: SendResult[] | undefined): Promise<void> {
    const now = Date.now();
    const live = this.#destination.urls.filter((url) => !round?.dead.has(url));
    // A round that sent nothing (every URL pausing) names what paused them, not only "url_paused".
    const last = round?.last ?? (results ? combine(results.map((r) => r.outcome)) : this.#pauseCause(live));
    if (live.length === 0) {
      await this.#deadLetter(m, "permanent_failure", attempt, last);
      return;
    }
    // Whole milliseconds: nak() takes an integer delay.
    const remaining = Math.floor(deadline - now);
    // A paused URL (Retry-After, or the breaker) is due when its pause ends; the others after the backoff.
    const dueAt = (url: string) => this.#pauses.pausedUntil(url, now) || undefined;
    const waits = live.map((url) => {
      const at = dueAt(url);
      return at === undefined ? undefined : Math.max(0, at - now);
    });
    const waited = now - (m.info.timestampNanos / 1e6); // since it was stored
    const backoff = results ? backoffMs(attempt - (round?.skipped ?? 0), remaining, Math.random, waited) : 0;
    let delay = nextRoundDelayMs(waits, backoff);
    if (delay > remaining - FINAL_ROUND_MARGIN_MS) {
      delay = remaining - FINAL_ROUND_MARGIN_MS;
      // Too soon to be worth it, or every URL would still be pausing at that last round.
      if (delay < MIN_FINAL_ROUND_DELAY_MS || live.every((url) => (dueAt(url) ?? 0) > now + delay)) {
        await this.#deadLetter(m, "retry_window_exhausted", attempt, last);
        return;
      }
    }
    this.#metrics.countDelivery(this.#label, "retry", "error" in last && last.error ? last.error : String(last.status ?? ""));
    this.#turn.add(() => m.nak(delay));
  }

  /**
   * Keeps what the next rounds must respect (URLs failed for good) and the last failure, for a
   * message with either a URL failed for good or a Retry-After (whose later rounds may send
   * nothing while it lasts), or one already held back by a pause; a message that is merely
   * retried leaves no entry. Returns the message's state.
   */
  #remember(seq: number, round: RoundState | undefined, results: SendResult[], outcome: AttemptOutcome, deadline: number): RoundState | undefined {
    const now = Date.now();
    for (const r of results) {
      const o = r.outcome;
      if (o.kind === "permanent") (round ??= newRoundState(deadline)).dead.add(r.url);
      else if (o.kind === "retry" && o.retryAfterMs !== undefined) round ??= newRoundState(deadline);
    }
    if (round) {
      round.last = outcome;
      this.#rounds.set(seq, round);
      this.#sweepRounds(now);
    }
    return round;
  }

  /**
   * Drops entries past their retry window. A message retried here may finish on another
   * replica (naks are redelivered to any of them), and its entry would otherwise stay forever.
   */
  #sweepRounds(now: number): void {
    if (now - this.#roundsSweptAt < ROUND_SWEEP_MS) return;
    this.#roundsSweptAt = now;
    for (const [seq, round] of this.#rounds) if (round.expiresAt < now) this.#rounds.delete(seq);
  }

  #headersFor(m: JsMsg, message: DeliverableMessage, body: Uint8Array): Record<string, string> {
    const headers: Record<string, string> = { ...this.#customHeaders };
    // messageIds are unique per source only (two sources may both send "order-1001"), so the
    // source is part of the id. A replayed message's own subject names the destination; the
    // subject it was first stored on names the source. Encoded: a messageId may hold
    // characters a header value cannot.
    const subject = m.subject === this.#replaySubject ? (m.headers?.get(DEAD_LETTER_HEADERS.originalSubject) ?? "") : m.subject;
    const source = this.#sourceOf(subject);
    // Well-formed first: encodeURIComponent throws on a lone surrogate (stored before ingest refused them).
    const deliveryId = `${this.#label}/${source}/${encodeURIComponent(message.messageId.toWellFormed())}`;
    headers[DELIVERY_ID_HEADER] = deliveryId;
    const keys = this.#signingKeys;
    if (keys) {
      headers[SIGNATURE_HEADER] = xSignature(body, keys.xSignature);
      if (this.#destination.standardWebhooks) Object.assign(headers, standardWebhookHeaders(deliveryId, Math.floor(Date.now() / 1000), body, keys.standardWebhooks));
    }
    return headers;
  }

  /**
   * Attempt records are published without waiting for a PubAck: a lost record only loses
   * history, and waiting cost a round trip per message. They leave with the turn's other traffic.
   * @param sentAt when the round's requests were sent (records are written when the last one ends).
   */
  #record(m: JsMsg, message: DeliverableMessage, attempt: number, sentAt: number, results: SendResult[]): void {
    const replay = m.subject === this.#replaySubject ? ({ replay: true } as const) : {};
    for (const r of results) {
      const o = r.outcome;
      const status = "status" in o ? o.status : undefined;
      const error = "error" in o ? o.error : undefined;
      this.#metrics.countAttempt(this.#label, status, error, r.latencyMs);
      if (error === "timeout") this.#logTimeout(r.url, message.messageId, attempt);
      const record: AttemptRecord = {
        destination: this.#label, url: this.#shownUrl(r.url), messageId: message.messageId, streamSequence: m.seq, attempt,
        outcome: o.kind, latencyMs: Math.round(r.latencyMs), at: isoTimestamp(sentAt), ...replay,
        ...(status !== undefined ? { status } : {}), ...(error ? { error } : {}), ...(r.responseSnippet ? { response: r.responseSnippet } : {}),
        ...(r.detail ? { detail: r.detail } : {}),
      };
      if (this.#records.push(JSON.stringify(record)) === 1) this.#turn.add(() => this.#publishRecords());
    }
  }

  /**
   * The turn's attempt records, one JSON record per line, up to RECORDS_PER_MESSAGE a message:
   * a stream message per record cost nats-server ~5 µs of CPU each (a third of what it spent per
   * delivered message in the benchmark), 30 to a message under 1 µs each; and in a replicated
   * stream every message is a consensus round.
   */
  #publishRecords(): void {
    const records = this.#records;
    this.#records = [];
    for (let i = 0; i < records.length; i += RECORDS_PER_MESSAGE) {
      // As bytes: nats.js would encode a string with TextEncoder, which allocates per call.
      const payload = Buffer.from(records.slice(i, i + RECORDS_PER_MESSAGE).join("\n"));
      try {
        this.#nc.publish(this.#attemptsSubject, payload);
      } catch (err) {
        this.#log.warn({ err: (err as Error).message }, "attempt records not published");
      }
    }
  }

  /** What paused the first of these URLs that was paused by something, else url_paused. */
  #pauseCause(urls: string[]): AttemptOutcome {
    for (const url of urls) {
      const cause = this.#pauses.causeOf(url);
      if (cause) return cause;
    }
    return URL_PAUSED;
  }

  /** Lets the destination's URL pauses learn from a round; logs a URL's pause beginning and ending. */
  #notePauses(results: SendResult[], sentAt: number): void {
    const now = Date.now();
    for (const r of results) {
      const change = this.#pauses.note(r.url, r.outcome, sentAt, now);
      if (change?.kind === "paused") {
        // A receiver may ask for a short pause on every answer: said once a minute per URL.
        const held = change.reason === "retry_after" ? this.#retryAfterLog.pass(r.url, now) : 0;
        if (held === undefined) continue;
        // What "not answering" was: a timeout, a refused connection, a certificate failing verification...
        const error = "error" in r.outcome ? r.outcome.error : undefined;
        this.#activity?.urlPaused({ destination: this.#label, url: this.#shownUrl(r.url), reason: change.reason, forMs: change.forMs, ...(error ? { error } : {}) });
        this.#log.warn(
          { url: this.#shownUrl(r.url), reason: change.reason, pauseMs: change.forMs, ...(error ? { error } : {}), ...(held > 0 ? { morePausesSinceLastLine: held } : {}) },
          change.reason === "retry_after" ? PAUSE_LINES.retry_after
            : error === "tls_verification_failed" ? PAUSE_LINES.certificate
            : error === "proxy_error" ? PAUSE_LINES.proxy
            : PAUSE_LINES.unreachable,
        );
      } else if (change?.kind === "resumed") {
        this.#activity?.urlResumed({ destination: this.#label, url: this.#shownUrl(r.url) });
        this.#log.info({ url: this.#shownUrl(r.url) }, "webhook URL answers again: messages are sent to it again");
      }
    }
  }

  /** The source of an event subject, remembered: a destination reads a few sources' few types. */
  #sourceOf(subject: string): string {
    let source = this.#sources.get(subject);
    if (source === undefined) {
      // "-" cannot be a source's name (a DNS label): a message of no known subject is still delivered.
      source = sourceOfEventSubject(subject) ?? "-";
      if (this.#sources.size >= 1024) this.#sources.clear();
      this.#sources.set(subject, source);
    }
    return source;
  }

  /** The destination's URLs no message is sent to now (as logs show them), and why. */
  pausedUrls(now = Date.now()): PausedUrl[] {
    if (this.#pauses.empty) return [];
    // The position tells apart URLs that redact alike (two Slack webhooks: hooks.slack.com/services/…).
    return [...this.#pauses.paused(now)].map(({ url, reason }) => ({ index: this.#destination.urls.indexOf(url), url: this.#shownUrl(url), reason }));
  }

  /** A URL as records and logs show it (redacted). */
  #shownUrl(url: string): string {
    return this.#redactedUrls.get(url) ?? redactUrl(url);
  }

  /**
   * The spec asks for a timeout to be logged. A receiver that stops answering times out on every
   * message, so this is one line per destination every LINE_INTERVAL_MS at most, counting
   * the ones in between; each attempt is in TRACKHOOK_ATTEMPTS and the metrics anyway.
   */
  #logTimeout(url: string, messageId: string, attempt: number): void {
    const held = this.#timeoutLog.pass();
    if (held === undefined) return;
    this.#log.warn(
      { url: this.#shownUrl(url), messageId, attempt, timeoutMs: this.#destination.timeoutMs, moreTimeoutsSinceLastLine: held },
      "webhook timed out: no answer within the destination's timeout; retried while the message's retry window lasts, unless another of the destination's URLs delivered it",
    );
  }

  async #deadLetter(m: JsMsg, reason: DeadLetterReason, attempts: number, last?: AttemptOutcome): Promise<void> {
    const letter = deadLetterOptions(m, this.#label, reason, attempts, last);
    try {
      await this.#js.publish(dlqSubject(this.#destination.namespace, this.#destination.name), m.data, letter);
    } catch (err) {
      // Without a stored dead letter the message must not be acked: try again later. It stays in
      // the events stream only until its max_age: a full dead-letter stream must be seen before.
      const message = (err as Error).message;
      const failure = deadLetterFailureOf(message);
      this.#metrics.countDelivery(this.#label, "dead_letter_failed", failure);
      const ageMs = Date.now() - m.info.timestampNanos / 1e6;
      this.#deadLetterRefusedAt = Date.now();
      // Every message of the destination comes here while the stream is full: a line every 10 s.
      const held = this.#deadLetterRefusedLog.pass();
      if (held !== undefined) {
        this.#log.error(
          {
            err: message, seq: m.seq, messageId: messageIdOf(m), reason, moreRefusedSinceLastLine: held,
            ...(Number.isFinite(this.#streamMaxAgeMs) ? { droppedFromStreamInSeconds: Math.round((this.#streamMaxAgeMs - ageMs) / 1000) } : {}),
          },
          DEAD_LETTER_REFUSED[failure],
        );
      }
      m.nak(this.#deadLetterRetryMs);
      return;
    }
    this.#rounds.delete(m.seq);
    this.#metrics.countDelivery(this.#label, "dead_lettered", reason);
    const original = letter.headers.get(DEAD_LETTER_HEADERS.originalSubject);
    if (original.endsWith(".delete")) {
      this.#metrics.countDeleteNotification(this.#label, "dead_lettered");
      this.#log.error({ seq: m.seq, messageId: messageIdOf(m), source: sourceOfEventSubject(original), reason, attempts }, "a delete notification (user erasure) moved to the dead-letter queue: the receiver did not get it; `trackhook replay` once it answers");
    } else {
      // A receiver answering 404 dead-letters every message: one line per reason every 10 s.
      const held = this.#deadLetterLog.pass(reason);
      if (held !== undefined) {
        this.#log.warn(
          { seq: m.seq, messageId: messageIdOf(m), reason, attempts, lastStatus: last && "status" in last ? last.status : undefined, lastError: last && "error" in last ? last.error : undefined, moreLikeThisSinceLastLine: held },
          "message moved to the dead-letter queue (`trackhook dead-letters` lists them)",
        );
      }
    }
    m.ack();
  }
}
