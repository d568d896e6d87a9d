// Free loopback ports for processes a test starts (servers it starts itself listen on port 0).
//
// A port found free and handed to a child process can be taken before the child binds it. The
// kernel hands out ports of its ephemeral range to every outgoing connection and every bind to
// port 0, and the tests beside this one make hundreds a second; so the ports are picked at random
// below that range, where only another explicit pick can land, and checked by binding them.
import { readFileSync } from "node:fs";
import { createServer, type AddressInfo, type Server } from "node:net";

const LOWEST = 10_000;

/** The first port of the kernel's ephemeral range (Linux's default when it cannot be read). */
function ephemeralStart(): number {
  try {
    const first = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    if (Number.isInteger(first) && first > LOWEST + 1000) return first;
  } catch {
    // Not Linux: the default below.
  }
  return 32_768;
}

function listen(port: number): Promise<Server | undefined> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(undefined));
    s.listen(port, "127.0.0.1", () => resolve(s));
  });
}

/** Distinct free loopback ports: all listeners stay open until every port is known. */
export async function freePorts(count: number): Promise<number[]> {
  const top = ephemeralStart();
  const held: Server[] = [];
  try {
    for (let tries = 0; held.length < count; tries++) {
      // After many taken picks (an odd machine), fall back to a port of the kernel's choosing.
      const pick = tries < 200 ? LOWEST + Math.floor(Math.random() * (top - LOWEST)) : 0;
      const server = await listen(pick);
      if (server) held.push(server);
      else if (pick === 0) throw new Error("no free loopback port");
    }
    return held.map((s) => (s.address() as AddressInfo).port);
  } finally {
    await Promise.all(held.map((s) => new Promise((r) => s.close(r))));
  }
}

export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port!;
}
