// Leader election on a coordination.k8s.io Lease, client-go's algorithm: the holder renews
// every retry period; others take over once the lease has not changed for leaseDuration, timed by
// their own monotonic clock from when they saw it change (never by comparing the holder's
// renewTime with their clock: pods' clocks differ, and a standby 20 s ahead would take a live
// leader's lease); every write carries the resourceVersion read, so of two candidates only one
// can win (409 for the other).
import { V1MicroTime, type V1Lease } from "@kubernetes/client-node";
import type { Logger } from "../dataplane/logging.ts";
import { apiErrorMessage, isConflict, isNotFound, type Kube } from "./kube/client.ts";

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  /** Unique per process (pod name plus a random part). */
  identity: string;
  leaseDurationMs: number;
  /** A leader that cannot renew within this long steps down. */
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

export const DEFAULT_LEASE = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

export class LeaderElector {
  readonly #kube: Kube;
  readonly #options: LeaderElectionOptions;
  readonly #log: Logger;
  #leading = false;
  #stopped = false;
  #timer: NodeJS.Timeout | undefined;
  #lastRenew = 0;
  #watchdog: NodeJS.Timeout | undefined;
  #inflight: Promise<unknown> = Promise.resolve();
  /** The lease as last read (its resourceVersion) and when it was first seen so, by performance.now(). */
  #observed: { version: string; at: number } | undefined;

  constructor(kube: Kube, options: LeaderElectionOptions, log: Logger) {
    this.#kube = kube;
    this.#options = options;
    this.#log = log;
  }

  get leading(): boolean {
    return this.#leading;
  }

  /**
   * Campaigns until elected (resolves then), and keeps renewing afterwards. `onLost` is called
   * once if leadership is lost; the process should then exit, as controller-runtime's managers do,
   * so no reconcile runs without the lease.
   */
  async acquire(onLost: (reason: string) => void): Promise<void> {
    for (;;) {
      if (this.#stopped) throw new Error("leader election stopped");
      if ((await this.#tryAcquireOrRenew()) === "held") break;
      await sleep(this.#options.retryPeriodMs);
    }
    this.#leading = true;
    this.#lastRenew = performance.now();
    this.#log.info({ lease: `${this.#options.namespace}/${this.#options.name}`, identity: this.#options.identity }, "became the leader");
    const lose = (reason: string) => {
      if (!this.#leading || this.#stopped) return;
      this.#leading = false;
      clearTimeout(this.#timer);
      clearInterval(this.#watchdog);
      onLost(reason);
    };
    // A renew call that hangs (a black-holed API server) must not keep this process acting:
    // the watchdog steps down once the last successful renew is older than the renew deadline,
    // by the monotonic clock (a wall clock stepped back would keep it leading past the deadline).
    this.#watchdog = setInterval(() => {
      if (performance.now() - this.#lastRenew > this.#options.renewDeadlineMs) lose("the lease could not be renewed within the renew deadline");
    }, Math.max(100, Math.floor(this.#options.retryPeriodMs / 2)));
    this.#watchdog.unref();
    const renew = async () => {
      if (this.#stopped) return;
      // Counted from the attempt's start: the renewTime written is no later than this.
      const attemptStart = performance.now();
      this.#inflight = this.#tryAcquireOrRenew();
      const outcome = await this.#inflight;
      if (this.#stopped) return;
      if (outcome === "held") this.#lastRenew = attemptStart;
      if (outcome === "held-by-other") return lose("another process holds the lease");
      this.#timer = setTimeout(() => void renew(), this.#options.retryPeriodMs);
    };
    this.#timer = setTimeout(() => void renew(), this.#options.retryPeriodMs);
  }

  /** Gives the lease up so a standby takes over at once instead of after leaseDuration. */
  async release(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    clearInterval(this.#watchdog);
    // A renew still in flight could otherwise take the lease back after the release.
    await this.#inflight;
    if (!this.#leading) return;
    this.#leading = false;
    try {
      const lease = await this.#read();
      if (lease?.spec?.holderIdentity !== this.#options.identity) return;
      const { holderIdentity: _released, ...rest } = lease.spec;
      lease.spec = { ...rest, leaseDurationSeconds: 1, renewTime: new V1MicroTime() };
      await this.#kube.coordination.replaceNamespacedLease({ namespace: this.#options.namespace, name: this.#options.name, body: lease });
    } catch (err) {
      this.#log.warn({ err: apiErrorMessage(err) }, "could not release the lease; a standby takes over when it expires");
    }
  }

  async #read(): Promise<V1Lease | undefined> {
    try {
      return await this.#kube.coordination.readNamespacedLease({ namespace: this.#options.namespace, name: this.#options.name });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /**
   * How long the lease has gone unchanged, as this process saw it: every renewal (or any write)
   * gives it a new resourceVersion. A lease first seen now counts from now, so a standby that
   * starts beside a dead leader waits one lease duration, as client-go's do.
   */
  #unchangedForMs(lease: V1Lease): number {
    const version = lease.metadata?.resourceVersion ?? "";
    const now = performance.now();
    if (this.#observed?.version !== version) this.#observed = { version, at: now };
    return now - this.#observed.at;
  }

  /** held: this process holds the lease now; failed: an API error, a timeout or a lost race. */
  #tryAcquireOrRenew(): Promise<"held" | "held-by-other" | "failed"> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<"failed">((resolve) => {
      timer = setTimeout(() => {
        // Said: a leader that goes on failing to renew stops at the renew deadline, and the
        // seconds before would otherwise be silent (an API server or etcd frozen, say).
        this.#log.warn({ timeoutMs: this.#options.renewDeadlineMs / 2, leading: this.#leading }, "leader election: the API server did not answer the lease request in time");
        resolve("failed");
      }, this.#options.renewDeadlineMs / 2);
    });
    return Promise.race([this.#attempt(), timeout]).finally(() => clearTimeout(timer));
  }

  async #attempt(): Promise<"held" | "held-by-other" | "failed"> {
    const { namespace, name, identity } = this.#options;
    const now = new V1MicroTime();
    const durationSeconds = Math.ceil(this.#options.leaseDurationMs / 1000);
    try {
      const lease = await this.#read();
      if (!lease) {
        await this.#kube.coordination.createNamespacedLease({
          namespace,
          body: {
            apiVersion: "coordination.k8s.io/v1",
            kind: "Lease",
            metadata: { name, namespace },
            spec: { holderIdentity: identity, leaseDurationSeconds: durationSeconds, acquireTime: now, renewTime: now, leaseTransitions: 0 },
          },
        });
        return "held";
      }
      const spec = lease.spec ?? {};
      const holder = spec.holderIdentity;
      const expired = this.#unchangedForMs(lease) > (spec.leaseDurationSeconds ?? durationSeconds) * 1000;
      if (holder && holder !== identity && !expired) return "held-by-other";
      const takingOver = holder !== identity;
      lease.spec = {
        holderIdentity: identity,
        leaseDurationSeconds: durationSeconds,
        acquireTime: takingOver ? now : spec.acquireTime ? new V1MicroTime(String(spec.acquireTime)) : now,
        renewTime: now,
        leaseTransitions: (spec.leaseTransitions ?? 0) + (takingOver && holder ? 1 : 0),
      };
      this.#unchangedForMs(await this.#kube.coordination.replaceNamespacedLease({ namespace, name, body: lease }));
      return "held";
    } catch (err) {
      if (!isConflict(err)) this.#log.warn({ err: apiErrorMessage(err) }, "leader election: lease update failed");
      return "failed";
    }
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms).unref());
