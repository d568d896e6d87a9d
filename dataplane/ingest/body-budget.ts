// How many batch request body bytes the ingest holds at once, all requests together, decompressed.
//
// Each request's body is bounded (500KB for a batch), but not how many arrive at once: a body is
// held, parsed (several times its size in objects) and copied into what is stored until JetStream
// answers. 256 batches of 900 events at once (with gzip, 4.6 MB on the wire) took one ingest past
// 700 MB and out of heap, and 128 to 544 MB, past the chart's 512Mi limit (found by a sizing
// review). Beyond the budget a batch is answered 503 `overloaded` while its body arrives, before
// it is parsed; SDKs retry it. Single messages (32KB at most) are not counted.

export interface BodyAccount {
  /** Takes `bytes` more for this request; false (taking nothing) when the budget has no room. */
  take(bytes: number): boolean;
  /** Gives back all this request took. */
  release(): void;
}

export class BodyBudget {
  readonly #limit: number;
  #held = 0;

  constructor(limitBytes: number) {
    this.#limit = limitBytes;
  }

  /** Bytes held now, by every request. */
  get held(): number {
    return this.#held;
  }

  /** A request's account. */
  open(): BodyAccount {
    let mine = 0;
    return {
      take: (bytes) => {
        // A request's first bytes are always taken: a budget below one body (a mistaken
        // setting) slows the ingest down rather than stopping it.
        if (mine > 0 && this.#held + bytes > this.#limit) return false;
        mine += bytes;
        this.#held += bytes;
        return true;
      },
      release: () => {
        this.#held -= mine;
        mine = 0;
      },
    };
  }
}
