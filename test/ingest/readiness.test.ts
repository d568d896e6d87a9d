// /readyz follows JetStream: 503 while nats-server is down (so Kubernetes takes the pod out of the
// Service), 200 again once it is back; /healthz stays 200 throughout (no restart loop).
import { describe, expect, it } from "vitest";
import { useIngest } from "../harness/ingest.ts";

const env = useIngest();

async function until(path: string, status: number, timeoutMs = 10_000): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(`${env.ingest.url}${path}`);
    if (res.status === status) return (await res.json()) as Record<string, unknown>;
    if (Date.now() > deadline) throw new Error(`${path} did not answer ${status} within ${timeoutMs} ms (last ${res.status})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("readiness", () => {
  it("is ready while JetStream answers", async () => {
    expect(await until("/readyz", 200)).toEqual({ status: "ready" });
  });

  it("is not ready while nats-server is down, and live all along", async () => {
    await env.nats.server.kill("SIGKILL");
    const body = await until("/readyz", 503);
    expect(body).toMatchObject({ status: "not_ready", reason: expect.stringContaining("TRACKHOOK_EVENTS") });
    expect((await fetch(`${env.ingest.url}/healthz`)).status).toBe(200);
  });

  it("is ready again once nats-server is back", async () => {
    await env.nats.server.restart();
    expect(await until("/readyz", 200)).toEqual({ status: "ready" });
  });
});
