// Webhook URLs may not reach private, loopback, link-local (metadata), CGNAT or reserved
// addresses, in any notation; the check runs on the addresses the connection would dial.
import { createServer, type Server } from "node:http";
import { Agent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkUrlHost, guardLookup, isForbiddenAddress } from "../../dataplane/delivery/ssrf.ts";

describe("forbidden addresses", () => {
  it.each([
    "127.0.0.1", "127.255.0.9", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fc00::1", "fd00:ec2::254", "fe80::1", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
    // Regressions (the security review): IPv4-compatible, SIIT-translated, local-use NAT64,
    // site-local, and 6to4 forms of forbidden IPv4 addresses were dialled.
    "::127.0.0.1", "::7f00:1", "::ffff:0:7f00:1", "64:ff9b:1::a9fe:a9fe", "fec0::1", "2002:7f00:1::", "2002:a9fe:a9fe::1", "2002:c0a8:101::", "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    // NAT64's well-known prefix holding a forbidden IPv4 address.
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::a00:1", "64:ff9b::",
  ])("%s is refused", (address) => expect(isForbiddenAddress(address)).toBe(true));

  it.each(["8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1",
    // DNS64's answer for 8.8.4.4 in an IPv6-only cluster (regression: the whole prefix was refused).
    "64:ff9b::808:404", "64:ff9b::8.8.4.4"])("%s is allowed", (address) =>
    expect(isForbiddenAddress(address)).toBe(false));

  it("refuses IP-literal URLs before dialling, in every notation", () => {
    for (const url of ["http://127.0.0.1:8080/x", "http://[::1]/x", "http://[::ffff:127.0.0.1]/x", "https://169.254.169.254/latest/meta-data"]) {
      expect(() => checkUrlHost(new URL(url)), url).toThrow(/private or reserved address/);
    }
    expect(() => checkUrlHost(new URL("https://8.8.8.8/hook"))).not.toThrow();
    // Decimal and hex forms are normalised by the URL parser, so they are caught too.
    expect(() => checkUrlHost(new URL("http://2130706433/x"))).toThrow();
    expect(() => checkUrlHost(new URL("http://0x7f.0.0.1/x"))).toThrow();
  });
});

describe("guarded DNS lookup on a real connection", () => {
  let server: Server;
  let port: number;
  let hits = 0;
  beforeAll(async () => {
    server = createServer((_req, res) => {
      hits++;
      res.end("ok");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("refuses a name that resolves to loopback, and no request reaches the server", async () => {
    const agent = new Agent({ connect: { lookup: guardLookup() } });
    const err = await request(`http://localhost:${port}/hook`, { dispatcher: agent, method: "POST", body: "{}" }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect(String((err as Error & { cause?: Error }).cause ?? err)).toMatch(/private or reserved address/);
    expect(hits).toBe(0);
    await agent.close();
  });

  it("connects normally without the guard (private networks allowed)", async () => {
    const agent = new Agent();
    const res = await request(`http://localhost:${port}/hook`, { dispatcher: agent, method: "POST", body: "{}" });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    expect(hits).toBe(1);
    await agent.close();
  });
});
