// The process-wide bound on messages in delivery, shared among the destinations so that none can
// starve another. Each destination is also bounded by its own maxInFlight (through its
// consumer's max_ack_pending, and its share here).
//
// Slots are shared among tenants (namespaces) first, then among each tenant's destinations: of T
// tenants, one with N destinations gives each a fair share of max/T/N slots (at most its
// maxInFlight), so a tenant's number of destinations is not the others' loss (a review saw one
// tenant's 100 destinations leave another's one destination 9 slots of 1,000; a tenant with more
// destinations than its share of slots still gives each one). An active
// destination (one that delivered within ACTIVE_FOR_MS) has its share reserved: the others
// cannot take it. Beyond its reserve a destination may borrow only what no active destination's
// unused reserve needs, and while some destination is idle, never the last max/N free slots of
// the N destinations (the lane that an idle destination with a message again takes at once). A slot freed goes
// to the waiting destination with the fewest in use, so borrowers share what is spare evenly. So a destination
// busy alone uses every slot (beside idle ones, all but the lane), while one whose receivers
// answer just before their timeout fills its reserve and what is spare, never the others' reserves.

/** How long a destination keeps its reserve after its last delivery. */
export const ACTIVE_FOR_MS = 30_000;
/** Idle destinations are looked for at most this often (only when a borrower is refused). */
const SWEEP_EVERY_MS = 1_000;

export class DeliverySlots {
  readonly max: number;
  #inUse = 0;
  readonly #shares = new Set<SlotShare>();
  /** The sum over active shares of the part of their reserve they do not use: free slots kept for them. */
  #unusedReserves = 0;
  /**
   * Acquires waiting for a slot. A freed slot goes to the waiter whose destination has the fewest
   * in use (first come first served among equals): spare slots are shared out evenly, so one
   * destination whose receivers answer slowly cannot hold them all while a fast one waits.
   */
  #waiting: Array<{ share: SlotShare; resolve: () => void }> = [];
  #sweptAt = 0;
  /** Free slots borrowers leave for idle destinations: a fair share while any is idle. */
  #lane = 0;
  readonly #now: () => number;

  constructor(max: number, now: () => number = Date.now) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`concurrency limit must be a positive integer, got ${max}`);
    this.max = max;
    this.#now = now;
  }

  get inUse(): number {
    return this.#inUse;
  }

  /**
   * A destination's share, bounded by its maxInFlight; `close()` it when the destination stops.
   * @param tenant whose destination it is (its namespace): tenants share the slots first.
   */
  share(maxInFlight: number, tenant = ""): SlotShare {
    const share = new SlotShare(this, maxInFlight, tenant);
    this.#shares.add(share);
    this.#rebalance();
    return share;
  }

  /** @internal SlotShare.close */
  remove(share: SlotShare): void {
    if (!this.#shares.delete(share)) return;
    share.active = false;
    share.reserve = 0;
    this.#rebalance();
    this.#wake();
  }

  /** @internal SlotShare.tryAcquire */
  take(share: SlotShare): boolean {
    if (share.inUse >= share.max) return false;
    // Wanting a slot makes a destination active, slot or not: from now on its reserve is kept.
    if (!share.active && this.#shares.has(share)) {
      share.active = true;
      this.#rebalance();
    }
    if (this.#inUse >= this.max) return false;
    const now = this.#now();
    if (!this.#mayTake(share) && !(this.#sweepIdle(now) && this.#mayTake(share))) return false;
    if (share.inUse < share.reserve) this.#unusedReserves--;
    share.inUse++;
    share.lastUsedAt = now;
    this.#inUse++;
    return true;
  }

  /**
   * Within its reserve; or beyond it, from slots no other destination's unused reserve needs
   * (its own unused reserve is none by then).
   */
  #mayTake(share: SlotShare): boolean {
    return share.inUse < share.reserve || this.max - this.#inUse > this.#unusedReserves + this.#lane;
  }

  /** @internal SlotShare.acquire */
  wait(share: SlotShare, resolve: () => void): void {
    this.#waiting.push({ share, resolve });
  }

  /** @internal SlotShare.release */
  give(share: SlotShare): void {
    share.inUse--;
    share.lastUsedAt = this.#now();
    this.#inUse--;
    if (share.inUse < share.reserve) this.#unusedReserves++;
    this.#wake();
  }

  /** Takes the reserve from destinations idle for ACTIVE_FOR_MS; says whether any was. */
  #sweepIdle(now: number): boolean {
    if (now - this.#sweptAt < SWEEP_EVERY_MS) return false;
    this.#sweptAt = now;
    let changed = false;
    for (const share of this.#shares) {
      if (share.active && share.inUse === 0 && now - share.lastUsedAt >= ACTIVE_FOR_MS && !this.#waiting.some((w) => w.share === share)) {
        share.active = false;
        changed = true;
      }
    }
    if (changed) this.#rebalance();
    return changed;
  }

  #rebalance(): void {
    const perTenant = new Map<string, number>();
    for (const share of this.#shares) perTenant.set(share.tenant, (perTenant.get(share.tenant) ?? 0) + 1);
    const tenantShare = this.max / Math.max(1, perTenant.size);
    // The lane is at most what one destination's share was before tenants came first: a tenant's
    // idle destination must not keep half the process from a busy one (the diff review), and the
    // rest of its reserve comes to it as borrowed slots free up (a freed slot goes to it first).
    const laneCap = Math.max(1, Math.floor(this.max / Math.max(1, this.#shares.size)));
    this.#lane = 0;
    this.#unusedReserves = 0;
    for (const share of this.#shares) {
      const each = Math.max(1, Math.floor(tenantShare / perTenant.get(share.tenant)!));
      // The lane: what the largest idle share takes at once when it is active again.
      if (!share.active) this.#lane = Math.max(this.#lane, Math.min(each, share.max, laneCap));
      share.reserve = share.active ? Math.min(each, share.max) : 0;
      this.#unusedReserves += Math.max(0, share.reserve - share.inUse);
    }
  }

  #wake(): void {
    while (this.#waiting.length > 0) {
      // The first-come waiter of the destination with the fewest in use: one pass, no sort.
      let best = 0;
      for (let i = 1; i < this.#waiting.length; i++) if (this.#waiting[i]!.share.inUse < this.#waiting[best]!.share.inUse) best = i;
      if (this.#serve(best)) continue;
      // It may not take one (its maxInFlight, or beyond its reserve with nothing spare) where
      // another may (within its reserve): those in order of arrival.
      let served = false;
      for (let i = 0; i < this.#waiting.length && !served; i++) if (i !== best) served = this.#serve(i);
      if (!served) return;
    }
  }

  /** Gives the i-th waiter a slot if its share may take one. */
  #serve(i: number): boolean {
    const waiter = this.#waiting[i]!;
    if (!this.take(waiter.share)) return false;
    this.#waiting.splice(i, 1);
    waiter.resolve();
    return true;
  }
}

/** One destination's part of the DeliverySlots. Its fields are the pool's to set. */
export class SlotShare {
  readonly max: number;
  readonly tenant: string;
  /** Slots kept for this share while it is active (set by the pool as destinations come and go). */
  reserve = 0;
  inUse = 0;
  active = false;
  lastUsedAt = 0;
  readonly #pool: DeliverySlots;

  constructor(pool: DeliverySlots, maxInFlight: number, tenant: string) {
    if (!Number.isInteger(maxInFlight) || maxInFlight < 1) throw new RangeError(`maxInFlight must be a positive integer, got ${maxInFlight}`);
    this.#pool = pool;
    this.max = maxInFlight;
    this.tenant = tenant;
  }

  /** Takes a slot if this share may, without waiting (and without a promise); pair a `true` with one release. */
  tryAcquire(): boolean {
    return this.#pool.take(this);
  }

  /** Resolves when this share may take a slot; pair every acquire with one release. */
  acquire(): Promise<void> {
    if (this.tryAcquire()) return Promise.resolve();
    return new Promise((resolve) => this.#pool.wait(this, resolve));
  }

  release(): void {
    this.#pool.give(this);
  }

  /** The destination stopped (after its deliveries ended): its reserve goes back to the others. */
  close(): void {
    this.#pool.remove(this);
  }
}
