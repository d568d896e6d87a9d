// One tenant's slow DNS must not hold up another's deliveries (regression: a destination whose five
// hostnames' DNS never answered took every thread of libuv's pool, and two healthy destinations
// beside it delivered nothing for 17 minutes). The resolver here is a fake one (pure logic);
// test/delivery/sender.test.ts and ssrf.test.ts send through the real one.
import type { LookupAddress } from "node:dns";
import { describe, expect, it } from "vitest";
import { ANSWER_TTL_MS, DnsCache, FAILURE_TTL_MS, dnsFirstLookup, systemNames, type SystemNames } from "../../dataplane/delivery/dns-cache.ts";
import { guardLookup } from "../../dataplane/delivery/ssrf.ts";
import { tempDir } from "../harness/temp.ts";

type Callback = (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void;

/** A resolver whose lookups the test answers by hand, and a clock the test moves. */
function fakeDns() {
  const pending: Array<{ hostname: string; answer: Callback }> = [];
  let now = 1_000_000;
  const cache = new DnsCache((hostname, answer) => void pending.push({ hostname, answer }), () => now);
  const resolve = (hostname: string) =>
    new Promise<{ err: NodeJS.ErrnoException | null; addresses: LookupAddress[] }>((done) => cache.resolve(hostname, (err, addresses) => done({ err, addresses })));
  const answer = (hostname: string, result: LookupAddress[] | NodeJS.ErrnoException) => {
    for (const p of pending.filter((q) => q.hostname === hostname)) {
      pending.splice(pending.indexOf(p), 1);
      if (Array.isArray(result)) p.answer(null, result);
      else p.answer(result, []);
    }
  };
  return { cache, pending, resolve, answer, tick: (ms: number) => void (now += ms) };
}

const A = [{ address: "93.184.216.34", family: 4 }];
const B = [{ address: "151.101.1.69", family: 4 }];
const error = (code: string) => Object.assign(new Error(code), { code }) as NodeJS.ErrnoException;

describe("DnsCache", () => {
  it("looks a name up once however many connections wait for it", async () => {
    const dns = fakeDns();
    const waiting = Array.from({ length: 100 }, () => dns.resolve("hooks.example.com"));
    expect(dns.pending).toHaveLength(1);
    dns.answer("hooks.example.com", A);
    for (const r of await Promise.all(waiting)) expect(r).toEqual({ err: null, addresses: A });
  });

  it("answers a name it resolved without waiting, and looks it up again in the background after the TTL", async () => {
    const dns = fakeDns();
    const first = dns.resolve("Hooks.Example.com");
    dns.answer("Hooks.Example.com", A);
    await first;
    expect((await dns.resolve("hooks.example.com")).addresses).toEqual(A);
    expect(dns.pending).toHaveLength(0);
    dns.tick(ANSWER_TTL_MS);
    // Past the TTL the old answer serves at once while a fresh lookup runs: a slow resolver never
    // holds up a destination that worked.
    expect((await dns.resolve("hooks.example.com")).addresses).toEqual(A);
    expect((await dns.resolve("hooks.example.com")).addresses).toEqual(A);
    expect(dns.pending).toHaveLength(1);
    dns.answer("hooks.example.com", B);
    expect((await dns.resolve("hooks.example.com")).addresses).toEqual(B);
  });

  it("a name gone from DNS fails after its refresh; a DNS server failing keeps the last answer", async () => {
    const dns = fakeDns();
    const first = dns.resolve("gone.example.com");
    dns.answer("gone.example.com", A);
    await first;
    dns.tick(ANSWER_TTL_MS);
    await dns.resolve("gone.example.com");
    dns.answer("gone.example.com", error("EAI_AGAIN"));
    expect((await dns.resolve("gone.example.com")).addresses).toEqual(A);
    dns.tick(ANSWER_TTL_MS);
    await dns.resolve("gone.example.com");
    dns.answer("gone.example.com", error("ENOTFOUND"));
    expect((await dns.resolve("gone.example.com")).err?.code).toBe("ENOTFOUND");
  });

  it("a failed lookup is answered with its error for a while, then tried again", async () => {
    const dns = fakeDns();
    const first = dns.resolve("slow.example.com");
    dns.answer("slow.example.com", error("EAI_AGAIN"));
    expect((await first).err?.code).toBe("EAI_AGAIN");
    expect((await dns.resolve("slow.example.com")).err?.code).toBe("EAI_AGAIN");
    expect(dns.pending).toHaveLength(0);
    dns.tick(FAILURE_TTL_MS);
    const again = dns.resolve("slow.example.com");
    expect(dns.pending).toHaveLength(1);
    dns.answer("slow.example.com", A);
    expect((await again).addresses).toEqual(A);
  });

  it("a name whose lookup hangs does not hold up another name", async () => {
    const dns = fakeDns();
    const hung = Array.from({ length: 500 }, () => dns.resolve("never.example.com"));
    const other = dns.resolve("healthy.example.com");
    expect(dns.pending.map((p) => p.hostname)).toEqual(["never.example.com", "healthy.example.com"]);
    dns.answer("healthy.example.com", A);
    expect((await other).addresses).toEqual(A);
    dns.answer("never.example.com", error("EAI_AGAIN"));
    await Promise.all(hung);
  });

  it("gives undici's connect one address or all of them, of the family asked for, through the SSRF guard", async () => {
    const both = [{ address: "2001:4860::1", family: 6 }, ...A];
    const cache = new DnsCache((_, answer) => answer(null, both));
    const lookup = (hostname: string, options: { family?: number; all?: boolean }) =>
      new Promise<unknown[]>((done) => cache.lookupFunction(hostname, options as never, (...args: unknown[]) => done(args)));
    expect(await lookup("x.example.com", { all: true })).toEqual([null, both]);
    expect(await lookup("x.example.com", { family: 4 })).toEqual([null, "93.184.216.34", 4]);
    const guarded = new DnsCache((_, answer) => answer(null, [...A, { address: "10.0.0.1", family: 4 }]));
    const [err] = await new Promise<unknown[]>((done) => guardLookup(guarded.lookupFunction)("rebind.example.com", {}, (...args: unknown[]) => done(args)));
    expect((err as Error).message).toMatch(/resolves to 10\.0\.0\.1, a private or reserved address/);
  });
});

describe("dnsFirstLookup (real sockets: a DNS server on loopback)", () => {
  /**
   * A UDP DNS server on loopback: it answers the A queries of the names in `answers`, and NXDOMAIN
   * for others; with no `answers`, it never answers at all.
   */
  async function dnsServer(answers?: Record<string, string>): Promise<{ address: string; close: () => void; queries: () => number; asked: string[] }> {
    const { createSocket } = await import("node:dgram");
    const socket = createSocket("udp4");
    let queries = 0;
    const asked: string[] = [];
    socket.on("message", (query, peer) => {
      queries++;
      if (!answers) return;
      // The question: length-prefixed labels up to a zero byte, then QTYPE and QCLASS.
      const labels: string[] = [];
      let end = 12;
      while (query[end] !== 0) {
        labels.push(query.subarray(end + 1, end + 1 + query[end]!).toString());
        end += query[end]! + 1;
      }
      const name = labels.join(".").toLowerCase();
      const question = query.subarray(12, end + 5);
      const isA = question.readUInt16BE(question.length - 4) === 1;
      if (isA) asked.push(name);
      const address = answers[name];
      const header = Buffer.from(query.subarray(0, 12));
      header.writeUInt16BE(address === undefined ? 0x8183 : 0x8180, 2); // a response; NXDOMAIN or no error
      header.writeUInt16BE(isA && address !== undefined ? 1 : 0, 6); // answers
      header.writeUInt16BE(0, 8);
      header.writeUInt16BE(0, 10);
      const record = address === undefined ? Buffer.alloc(0) : Buffer.concat([Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]), Buffer.from(address.split(".").map(Number))]);
      socket.send(Buffer.concat([header, question, isA ? record : Buffer.alloc(0)]), peer.port, peer.address);
    });
    await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
    return { address: `127.0.0.1:${socket.address().port}`, close: () => socket.close(), queries: () => queries, asked };
  }
  /** What resolv.conf and the hosts file would say. */
  const system = (search: string[] = [], ndots = 1, hosts: Record<string, string> = {}): SystemNames => ({
    hosts: (name) => (hosts[name] ? [{ address: hosts[name], family: 4 }] : undefined),
    search: () => ({ domains: search, ndots }),
  });
  const resolverOf = async (server: string) => {
    const { Resolver } = await import("node:dns/promises");
    const resolver = new Resolver({ timeout: 200, tries: 1 });
    resolver.setServers([server]);
    return resolver;
  };
  const lookupWith = (lookup: ReturnType<typeof dnsFirstLookup>, name: string) =>
    new Promise<{ err: NodeJS.ErrnoException | null; addresses: LookupAddress[] }>((done) => lookup(name, (err, addresses) => done({ err, addresses })));

  it("answers from DNS", async () => {
    const server = await dnsServer({ "hooks.example.com": "93.184.216.34" });
    try {
      const result = await lookupWith(dnsFirstLookup(await resolverOf(server.address), system()), "hooks.example.com");
      expect(result).toEqual({ err: null, addresses: [{ address: "93.184.216.34", family: 4 }] });
    } finally {
      server.close();
    }
  });

  it("tries the search domains as resolv.conf orders them, so a cluster's Service wins over a public name (found by a diff review)", async () => {
    const server = await dnsServer({ "api.dev.svc.cluster.local": "10.96.0.7", "api.dev": "203.0.113.9", "hooks.example.com": "93.184.216.34" });
    try {
      const lookup = dnsFirstLookup(await resolverOf(server.address), system(["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"], 5));
      expect(await lookupWith(lookup, "api.dev")).toEqual({ err: null, addresses: [{ address: "10.96.0.7", family: 4 }] });
      expect(server.asked).toEqual(["api.dev.shop.svc.cluster.local", "api.dev.svc.cluster.local"]);
      expect((await lookupWith(lookup, "hooks.example.com")).addresses).toEqual([{ address: "93.184.216.34", family: 4 }]);
      // With ndots 1 the name itself comes first; a trailing dot asks only the name.
      const plain = dnsFirstLookup(await resolverOf(server.address), system(["svc.cluster.local"], 1));
      expect((await lookupWith(plain, "api.dev")).addresses).toEqual([{ address: "203.0.113.9", family: 4 }]);
      expect((await lookupWith(lookup, "api.dev.")).addresses).toEqual([{ address: "203.0.113.9", family: 4 }]);
    } finally {
      server.close();
    }
  });

  it("the hosts file wins over DNS (hostAliases, --add-host)", async () => {
    const server = await dnsServer({ "hooks.example.com": "93.184.216.34" });
    try {
      const lookup = dnsFirstLookup(await resolverOf(server.address), system([], 1, { "hooks.example.com": "192.0.2.10" }));
      expect(await lookupWith(lookup, "Hooks.Example.com")).toEqual({ err: null, addresses: [{ address: "192.0.2.10", family: 4 }] });
      expect(server.asked).toEqual([]);
    } finally {
      server.close();
    }
  });

  it("reads search, ndots and the hosts file as the system does", async () => {
    const { writeFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const dir = tempDir("dns");
    writeFileSync(join(dir, "hosts"), "127.0.0.1 localhost\n# a comment\n10.0.0.5  Receiver.internal  receiver # trailing\n::1 ip6-localhost\n");
    writeFileSync(join(dir, "resolv.conf"), "nameserver 10.96.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5 timeout:2\n");
    const names = systemNames(join(dir, "hosts"), join(dir, "resolv.conf"));
    expect(names.hosts("receiver.internal")).toEqual([{ address: "10.0.0.5", family: 4 }]);
    expect(names.hosts("ip6-localhost")).toEqual([{ address: "::1", family: 6 }]);
    expect(names.hosts("a-comment")).toBeUndefined();
    expect(names.search()).toEqual({ domains: ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"], ndots: 5 });
  });

  it("a DNS server that never answers: EAI_AGAIN after the query's timeout, and no thread of libuv's pool held meanwhile (regression: 40 destinations' dead DNS held every thread, and a healthy destination's lookup waited 90 s)", async () => {
    const server = await dnsServer();
    try {
      const lookup = dnsFirstLookup(await resolverOf(server.address), system());
      const hanging = Array.from({ length: 200 }, (_, i) => lookupWith(lookup, `hang-${i}.example.com`));
      // getaddrinfo (localhost goes to the system) and file reads share the pool: both still fast.
      const started = performance.now();
      const local = await lookupWith(lookup, "localhost");
      const { readFile } = await import("node:fs/promises");
      await readFile(new URL(import.meta.url));
      expect(performance.now() - started).toBeLessThan(500);
      expect(local.err).toBeNull();
      const results = await Promise.all(hanging);
      expect(results.every((r) => r.err?.code === "EAI_AGAIN")).toBe(true);
      expect(server.queries()).toBeGreaterThanOrEqual(200);
    } finally {
      server.close();
    }
  });
});
