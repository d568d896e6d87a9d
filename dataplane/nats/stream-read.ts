// Reading a stream through short-lived ordered consumers, deleted when the read ends (and
// expiring on their own if the process dies), so nothing lingers: what it held when the read
// began (readStored), or what it stores from now on (followStream).
import { DeliverPolicy, type Consumer, type JetStreamClient, type JetStreamManager, type JsMsg, type OrderedConsumerOptions } from "@nats-io/jetstream";
import { isStreamNotFound } from "./streams.ts";

/** Messages per pull request. */
export const FETCH_BATCH = 256;
/** How long a fetch waits for messages the consumer said were pending (they may have been deleted meanwhile). */
export const FETCH_EXPIRES_MS = 5_000;
/** An ordered consumer left behind by a killed process is removed by the server after this. */
export const INACTIVE_THRESHOLD_MS = 30_000;

/**
 * The messages of a stream matching `filter`, oldest first, that were stored when the read began:
 * at most `limit`, and none stored after the read started (so a replayed message that is
 * dead-lettered again during the same replay is not read twice).
 */
export async function* readStored(
  js: JetStreamClient,
  stream: string,
  filter: string,
  options: { startTime?: Date; startSeq?: number; limit?: number; lastSeq?: number; whole?: boolean } = {},
): AsyncGenerator<JsMsg> {
  const opts: Partial<OrderedConsumerOptions> = { filter_subjects: filter, inactive_threshold: INACTIVE_THRESHOLD_MS };
  if (options.startTime) opts.opt_start_time = options.startTime.toISOString();
  else if (options.startSeq !== undefined) Object.assign(opts, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: options.startSeq });
  else opts.deliver_policy = DeliverPolicy.All;
  const consumer: Consumer = await js.consumers.get(stream, opts);
  try {
    // num_pending at creation: what matches the filter now; later messages are not read.
    let remaining = Math.min((await consumer.info(true)).num_pending, options.limit ?? Number.POSITIVE_INFINITY);
    while (remaining > 0) {
      const batch = await consumer.fetch({ max_messages: Math.min(remaining, FETCH_BATCH), expires: FETCH_EXPIRES_MS });
      let got = 0;
      for await (const m of batch) {
        got++;
        if (options.lastSeq !== undefined && m.seq > options.lastSeq) {
          remaining = 0;
          break;
        }
        remaining--;
        yield m;
        if (m.info.pending === 0) remaining = 0;
        if (remaining === 0) break;
      }
      // Fewer than pending: some were deleted meanwhile (another replay); nothing more to read.
      // Unless the fetch only timed out (a busy server): a reader that must see every message
      // (`whole`) says so rather than end early as if it had.
      if (got === 0) {
        if (options.whole && (await consumer.info(true)).num_pending > 0) throw new Error(`reading ${stream} stopped early: a fetch timed out; try again`);
        break;
      }
    }
  } finally {
    await consumer.delete().catch(() => {});
  }
}

export async function streamLastSeq(jsm: JetStreamManager, stream: string): Promise<number | undefined> {
  try {
    return (await jsm.streams.info(stream)).state.last_seq;
  } catch (err) {
    if (isStreamNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * The messages a stream stores from the moment this resolves (or from `sinceMs` ago), until
 * `signal` fires or the caller stops iterating. It resolves once the ordered consumer exists, so
 * anything published after that is seen.
 */
export async function followStream(js: JetStreamClient, stream: string, filter: string, options: { sinceMs?: number; signal: AbortSignal }): Promise<AsyncIterable<JsMsg>> {
  const start = options.sinceMs !== undefined
    ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(Date.now() - options.sinceMs).toISOString() }
    : { deliver_policy: DeliverPolicy.New };
  const consumer = await js.consumers.get(stream, { filter_subjects: filter, ...start, inactive_threshold: INACTIVE_THRESHOLD_MS });
  const messages = await consumer.consume({ max_messages: FETCH_BATCH });
  let cleaned: Promise<void> | undefined;
  const cleanup = () => (cleaned ??= (async () => {
    options.signal.removeEventListener("abort", onAbort);
    await messages.close();
    await consumer.delete().catch(() => {});
  })());
  const onAbort = () => void cleanup();
  if (options.signal.aborted) void cleanup();
  else options.signal.addEventListener("abort", onAbort, { once: true });
  return (async function* () {
    try {
      yield* messages;
    } finally {
      await cleanup();
    }
  })();
}
