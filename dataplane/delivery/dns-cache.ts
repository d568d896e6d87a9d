// Name lookups for webhook connections, shared and remembered, so that one tenant's slow DNS
// cannot hold up another tenant's deliveries.
//
// Why: dns.lookup() runs getaddrinfo on libuv's thread pool (4 threads by default). A review
// gave one destination five hostnames whose DNS server never answered (10 s per lookup): its
// 100 messages in flight took every thread, a healthy destination's lookup of a name in
// /etc/hosts waited 22 s behind them, and two healthy destinations beside it stopped for 17
// minutes. The 5 s request deadline ends the request, not its lookup. Here a name has at most one
// lookup in flight, whatever the number of messages; an answer is kept for ANSWER_TTL_MS; and
// once a name has been resolved, its last answer is used while a fresh one is looked up, so a
// destination that worked never waits for the pool again. (The CLI also enlarges the pool: see
// cli/main.ts.) The addresses are still judged on every connection by the SSRF guard.
import { ADDRCONFIG, lookup as dnsLookup, type LookupAddress } from "node:dns";
import { Resolver } from "node:dns/promises";
import { isIP, type LookupFunction } from "node:net";
import { networkInterfaces } from "node:os";
import { readFileSync, statSync } from "node:fs";

/** How long an answer is used before it is looked up again (served meanwhile). */
export const ANSWER_TTL_MS = 30_000;
/** How long a failed lookup is answered with its error before it is tried again. */
export const FAILURE_TTL_MS = 5_000;
/** Names remembered at most; past it the cache starts over (destinations name a few each). */
const MAX_NAMES = 10_000;

type Answer = (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void;
type Lookup = (hostname: string, callback: Answer) => void;

interface Entry {
  at: number;
  addresses?: LookupAddress[];
  error?: NodeJS.ErrnoException;
  /** Callers waiting for the lookup in flight (a first one, or a failed name tried again). */
  waiting?: Answer[];
  refreshing?: boolean;
}

/**
 * The system's getaddrinfo, with the ADDRCONFIG hint node:net gives it: on a pod without IPv6 an
 * AAAA record is left out, or Node's happy eyeballs would give up the IPv4 connection after 250 ms
 * for an IPv6 one that cannot work.
 */
const systemLookup: Lookup = (hostname, callback) =>
  dnsLookup(hostname, { all: true, family: 0, hints: process.platform === "win32" ? 0 : ADDRCONFIG }, callback);

/** How long one DNS query waits for an answer, and how often it is asked (c-ares doubles the wait). */
export const DNS_QUERY = { timeoutMs: 1_500, tries: 2 } as const;

/** What getaddrinfo reads besides DNS itself: the hosts file, and the resolver's search list. */
export interface SystemNames {
  /** Addresses of a name in the hosts file (lower case), if it is there. */
  hosts(name: string): LookupAddress[] | undefined;
  /** `search` (or `domain`) and `options ndots` of resolv.conf. */
  search(): { domains: string[]; ndots: number };
}

/**
 * Names looked up by querying DNS directly (c-ares: no thread held), as getaddrinfo would: the
 * hosts file first, then the resolver's search list the way resolv.conf orders it (a name with
 * fewer dots than `ndots` tries the search domains first: in a pod, `api.dev` is the Service
 * `api.dev.svc.cluster.local`, not a public `api.dev`), then getaddrinfo itself for a name DNS does
 * not know at all (other name services), and for single-label and `.localhost` names.
 *
 * Why: getaddrinfo holds one of libuv's threads (32 here: cli/main.ts) until the system resolver
 * gives up, and cannot be cancelled. A review gave 40 destinations five names each whose DNS never
 * answered: every thread was held, and a healthy destination's first lookup waited behind them,
 * nothing delivered for 90 s. A query here costs a socket and a timer, and gives up after
 * DNS_QUERY; a DNS server failing (a timeout, SERVFAIL, REFUSED) is reported as EAI_AGAIN without
 * asking getaddrinfo, which would only wait on the same server again.
 */
export function dnsFirstLookup(
  resolver: Resolver = new Resolver({ timeout: DNS_QUERY.timeoutMs, tries: DNS_QUERY.tries }),
  system: SystemNames = systemNames(),
): Lookup {
  return (hostname, callback) => {
    if (!hostname.includes(".") || hostname === "localhost" || hostname.endsWith(".localhost") || isIP(hostname)) {
      return systemLookup(hostname, callback);
    }
    const absolute = hostname.endsWith(".");
    const name = (absolute ? hostname.slice(0, -1) : hostname).toLowerCase();
    const inHosts = system.hosts(name);
    if (inHosts) return callback(null, inHosts);
    const { domains, ndots } = system.search();
    const searched = absolute ? [] : domains.map((domain) => `${name}.${domain}`);
    const candidates = absolute ? [name] : name.split(".").length - 1 >= ndots ? [name, ...searched] : [...searched, name];
    void (async () => {
      let failure: NodeJS.ErrnoException | undefined;
      for (const candidate of candidates) {
        const answer = await query(resolver, candidate);
        if (Array.isArray(answer)) return callback(null, answer);
        if (answer) failure ??= answer;
      }
      // Not in DNS under any name: the system may know it another way.
      if (!failure) return systemLookup(hostname, callback);
      callback(Object.assign(new Error(`DNS lookup of ${hostname} failed: ${failure.code}`), { code: "EAI_AGAIN", hostname, cause: failure }) as NodeJS.ErrnoException, []);
    })();
  };
}

/** A name's A and AAAA records; undefined when DNS has none; the error when DNS failed. */
async function query(resolver: Resolver, name: string): Promise<LookupAddress[] | NodeJS.ErrnoException | undefined> {
  const [a, aaaa] = await Promise.allSettled([resolver.resolve4(name), hasIPv6() ? resolver.resolve6(name) : Promise.resolve([])]);
  const addresses: LookupAddress[] = [
    ...(a.status === "fulfilled" ? a.value.map((address) => ({ address, family: 4 })) : []),
    ...(aaaa.status === "fulfilled" ? aaaa.value.map((address) => ({ address, family: 6 })) : []),
  ];
  if (addresses.length > 0) return addresses;
  const failures = [a, aaaa].flatMap((r) => (r.status === "rejected" ? [r.reason as NodeJS.ErrnoException] : []));
  return failures.find((e) => !NOT_IN_DNS.has(e.code ?? ""));
}

/** c-ares answers that say only that DNS has no such record. */
const NOT_IN_DNS = new Set(["ENOTFOUND", "ENODATA", "ENONAME", "EBADNAME"]);

/** The hosts file and resolv.conf, read again when they change (checked at most every 5 s). */
export function systemNames(hostsPath = "/etc/hosts", resolvConfPath = "/etc/resolv.conf"): SystemNames {
  const hosts = watchedFile(hostsPath, (text) => {
    const byName = new Map<string, LookupAddress[]>();
    for (const line of text.split("\n")) {
      const [address, ...names] = line.replace(/#.*/, "").trim().split(/\s+/);
      const family = address ? isIP(address) : 0;
      if (family === 0) continue;
      for (const n of names) {
        const key = n.toLowerCase();
        byName.set(key, [...(byName.get(key) ?? []), { address: address!, family }]);
      }
    }
    return byName;
  });
  const search = watchedFile(resolvConfPath, (text) => {
    let domains: string[] = [];
    let ndots = 1;
    for (const line of text.split("\n")) {
      const [keyword, ...args] = line.replace(/[#;].*/, "").trim().split(/\s+/);
      if (keyword === "search" || keyword === "domain") domains = args.map((d) => d.replace(/\.$/, "").toLowerCase()).filter(Boolean);
      if (keyword === "options") for (const option of args) if (option.startsWith("ndots:")) ndots = Math.min(15, Number(option.slice(6)) || 0);
    }
    return { domains, ndots };
  });
  return { hosts: (name) => hosts()?.get(name), search: () => search() ?? { domains: [], ndots: 1 } };
}

function watchedFile<T>(path: string, parse: (text: string) => T): () => T | undefined {
  let checked = 0;
  let mtime = -1;
  let value: T | undefined;
  return () => {
    const now = Date.now();
    if (now - checked < 5_000) return value;
    checked = now;
    try {
      const stat = statSync(path);
      if (stat.mtimeMs !== mtime) {
        mtime = stat.mtimeMs;
        value = parse(readFileSync(path, "utf8"));
      }
    } catch {
      value = undefined;
    }
    return value;
  };
}

let ipv6Checked = 0;
let ipv6 = false;
/** Whether this host has a global IPv6 address (what getaddrinfo's ADDRCONFIG asks), checked at most once a minute. */
function hasIPv6(): boolean {
  const now = Date.now();
  if (now - ipv6Checked < 60_000) return ipv6;
  ipv6Checked = now;
  ipv6 = Object.values(networkInterfaces()).some((list) => list?.some((i) => i.family === "IPv6" && !i.internal && !i.address.startsWith("fe80")));
  return ipv6;
}

export class DnsCache {
  readonly #lookup: Lookup;
  readonly #now: () => number;
  readonly #entries = new Map<string, Entry>();

  /** @param lookup the resolver (tests give a fake one); DNS first, then the system's getaddrinfo (dnsFirstLookup), by default. */
  constructor(lookup: Lookup = dnsFirstLookup(), now: () => number = Date.now) {
    this.#lookup = lookup;
    this.#now = now;
  }

  /** Every address of a name (IPv4 and IPv6), from the cache when it can. */
  resolve(hostname: string, callback: Answer): void {
    const key = hostname.toLowerCase();
    const entry = this.#entries.get(key);
    const now = this.#now();
    if (entry?.addresses) {
      if (now - entry.at >= ANSWER_TTL_MS && !entry.refreshing) this.#refresh(key, entry);
      return callback(null, entry.addresses);
    }
    if (entry?.waiting) return void entry.waiting.push(callback);
    if (entry?.error && now - entry.at < FAILURE_TTL_MS) return callback(entry.error, []);
    if (this.#entries.size >= MAX_NAMES) this.#entries.clear();
    const fresh: Entry = { at: now, waiting: [callback] };
    this.#entries.set(key, fresh);
    this.#lookup(hostname, (err, addresses) => {
      const waiting = fresh.waiting ?? [];
      delete fresh.waiting;
      fresh.at = this.#now();
      if (err || addresses.length === 0) fresh.error = err ?? notFound(hostname);
      else fresh.addresses = addresses;
      for (const waiter of waiting) waiter(fresh.error ?? null, fresh.addresses ?? []);
    });
  }

  /** A node:net lookup function over the cache, for undici's connect(). */
  readonly lookupFunction: LookupFunction = (hostname, options, callback) => {
    this.resolve(hostname, (err, all) => {
      if (err) return callback(err, []);
      const addresses = options.family === 4 || options.family === 6 ? all.filter((a) => a.family === options.family) : all;
      if (addresses.length === 0) return callback(notFound(hostname), []);
      if (options.all) return callback(null, addresses);
      return callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  };

  /** Looks a known name up again in the background; its last answer serves meanwhile. */
  #refresh(key: string, entry: Entry): void {
    entry.refreshing = true;
    this.#lookup(key, (err, addresses) => {
      entry.refreshing = false;
      entry.at = this.#now();
      if (this.#entries.get(key) !== entry) return;
      if (!err && addresses.length > 0) entry.addresses = addresses;
      // Gone from DNS: say so from now on, as a fresh lookup would. A failing DNS server
      // (EAI_AGAIN, a timeout) is no news about the name: its last answer goes on serving.
      else if (!err || err.code === "ENOTFOUND" || err.code === "ENODATA") this.#entries.set(key, { at: entry.at, error: err ?? notFound(key) });
    });
  }
}

function notFound(hostname: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND", hostname }) as NodeJS.ErrnoException;
}
