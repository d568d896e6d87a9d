// Refuses webhook URLs that reach into the operator's own network: loopback, private, link-local
// (cloud metadata lives at 169.254.169.254), CGNAT, multicast, reserved and unspecified ranges, in
// IPv4, IPv6 and IPv4-mapped IPv6 form. The check runs on the addresses DNS returns for the
// connection being made (see guardLookup), so a name that resolves differently later (DNS
// rebinding) cannot slip through, and on IP literals before dialling.
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP, type LookupFunction } from "node:net";

const FORBIDDEN = new BlockList();
const FORBIDDEN_IPV4 = [
  ["0.0.0.0", 8], ["10.0.0.0", 8], ["100.64.0.0", 10], ["127.0.0.0", 8], ["169.254.0.0", 16], ["172.16.0.0", 12],
  ["192.0.0.0", 24], ["192.0.2.0", 24], ["192.88.99.0", 24], ["192.168.0.0", 16], ["198.18.0.0", 15],
  ["198.51.100.0", 24], ["203.0.113.0", 24], ["224.0.0.0", 4], ["240.0.0.0", 4],
] as const;
for (const [network, prefix] of FORBIDDEN_IPV4) FORBIDDEN.addSubnet(network, prefix, "ipv4");
for (const [network, prefix] of [
  // ::/96 holds ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d; ::ffff:0:a.b.c.d is SIIT's
  // IPv4-translated form; 64:ff9b:1::/48 is the local-use NAT64 prefix (where it holds the IPv4
  // address depends on the network's prefix length); fec0::/10 is the deprecated site-local
  // range; 2001::/32 is Teredo, which tunnels to an (obfuscated) IPv4.
  ["::", 96], ["::ffff:0:0:0", 96], ["64:ff9b:1::", 48], ["100::", 64], ["2001::", 32], ["2001:db8::", 32],
  ["fc00::", 7], ["fe80::", 10], ["fec0::", 10], ["ff00::", 8],
] as const) FORBIDDEN.addSubnet(network, prefix, "ipv6");
// 6to4 (2002::/16) carries an IPv4 address in its next 32 bits, NAT64's well-known prefix
// (64:ff9b::/96) in its last 32: refused when that one would be. A DNS64 resolver (IPv6-only
// clusters) answers 64:ff9b::808:808 for 8.8.8.8: refusing the whole prefix refused every receiver
// without IPv6 there (found by a review).
for (const [network, prefix] of FORBIDDEN_IPV4) {
  const [a, b, c, d] = network.split(".").map(Number) as [number, number, number, number];
  const hex = (hi: number, lo: number) => ((hi << 8) | lo).toString(16);
  FORBIDDEN.addSubnet(`2002:${hex(a, b)}:${hex(c, d)}::`, 16 + prefix, "ipv6");
  FORBIDDEN.addSubnet(`64:ff9b::${hex(a, b)}:${hex(c, d)}`, 96 + prefix, "ipv6");
}

/** Whether an IP address is one webhooks may not reach (IPv4-mapped IPv6 is judged as its IPv4). */
export function isForbiddenAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return true; // not an address at all: refuse rather than guess
  return FORBIDDEN.check(address, family === 4 ? "ipv4" : "ipv6");
}

export class PrivateAddressError extends Error {
  readonly code = "private_address_refused";
  constructor(host: string, address: string) {
    super(`${host} resolves to ${address}, a private or reserved address; refused (allow private networks to permit it)`);
    this.name = "PrivateAddressError";
  }
}

/**
 * A lookup for the HTTP client's connect() that resolves with `lookup` (the system's by default,
 * the sender's DnsCache in delivery), then refuses the connection when any resolved address is
 * forbidden (one bad record is enough to be an attack).
 */
export function guardLookup(lookup: LookupFunction = dnsLookup as LookupFunction): LookupFunction {
  return (hostname, options, callback) => {
    lookup(hostname, { ...options, all: true }, (err, resolved) => {
      if (err) return callback(err, []);
      const addresses = resolved as unknown as LookupAddress[];
      const bad = addresses.find((a) => isForbiddenAddress(a.address));
      if (bad) return callback(new PrivateAddressError(hostname, bad.address) as NodeJS.ErrnoException, []);
      if (options.all) return callback(null, addresses);
      const [first] = addresses;
      return callback(null, first!.address, first!.family);
    });
  };
}

/** Checks a URL whose host is an IP literal (which no lookup sees); names are checked at connect time. */
export function checkUrlHost(url: URL): void {
  const host = bareHost(url);
  if (isIP(host) !== 0 && isForbiddenAddress(host)) throw new PrivateAddressError(url.hostname, host);
}

/** A URL's host without an IPv6 literal's brackets. */
export const bareHost = (url: URL) => url.hostname.replace(/^\[|\]$/g, "");

/** Cluster DNS suffixes: such a name resolves to a Service's private address. */
const CLUSTER_SUFFIXES = [".svc", ".svc.cluster.local", ".cluster.local", ".localhost"];

/**
 * Whether a URL can only reach a private address, as far as its text tells: a private, loopback
 * or link-local IP literal, localhost, or a cluster-internal name. Other names are judged when
 * connecting (guardLookup).
 */
export function urlReachesOnlyPrivate(url: URL): boolean {
  const host = bareHost(url).toLowerCase().replace(/\.$/, "");
  if (isIP(host) !== 0) return isForbiddenAddress(host);
  return host === "localhost" || CLUSTER_SUFFIXES.some((suffix) => host.endsWith(suffix));
}
