// `trackhook deliver` as a process: without --allow-private-networks a webhook on a loopback
// address is refused (no request sent, dead-lettered, recorded as private_address_refused); with
// it the message is delivered. Health, readiness and metrics are served, and SIGTERM drains.
import { spawn, spawnSync } from "node:child_process";
import { renameSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ATTEMPTS_STREAM, DLQ_STREAM } from "../../dataplane/nats/mod.ts";
import { basic, configFromYaml, post, startIngest, type IngestHarness } from "../harness/ingest.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";
import { freePort } from "../harness/ports.ts";
import { startProxy } from "../harness/proxy.ts";
import { startReceiver, type Receiver } from "../harness/receiver.ts";
import { tempDir } from "../harness/temp.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
let nats: NatsHarness;
let ingest: IngestHarness;
let receiver: Receiver;
let configDir: string;

const yaml = (url: string) => `
apiVersion: v1
kind: Secret
metadata: { name: keys }
stringData: { writeKey: cli-key }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: app }
spec: { writeKeySecretRef: { name: keys, key: writeKey } }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: local }
spec: { sources: [app], urls: ["${url}"] }
`;

beforeAll(async () => {
  nats = await startNats();
  receiver = await startReceiver();
  configDir = tempDir("deliver");
  writeFileSync(join(configDir, "config.yaml"), yaml(receiver.url("/hook")));
  ingest = await startIngest(nats, { config: configFromYaml(yaml(receiver.url("/hook"))) });
});
afterAll(async () => {
  await ingest?.close();
  await receiver?.close();
  await nats?.stop();
});

async function runDeliver(
  extra: string[],
  body: (ops: string, output: () => string) => Promise<void>,
  env: Record<string, string> = {},
  on: { nats: NatsHarness; configDir: string } = { nats, configDir },
): Promise<number | null> {
  const args = ["deliver", "--config", on.configDir, "--nats", on.nats.server.url, "--host", "127.0.0.1", "--port", "0", ...extra];
  const child = spawn(process.execPath, [join(root, "cli/main.ts"), ...args], { cwd: root, env: { ...process.env, ...env } });
  let output = "";
  child.stdout.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr.on("data", (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  try {
    const deadline = Date.now() + 20_000;
    let address: string | undefined;
    while (!(address = /"address":"(http:\/\/[^"]+)".*"msg":"delivery running/.exec(output)?.[1])) {
      if (Date.now() > deadline) throw new Error(`deliver did not start:\n${output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await body(address, () => output);
  } finally {
    child.kill("SIGTERM");
  }
  return exited;
}

async function until<T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (ok(value)) return value;
    if (Date.now() > deadline) throw new Error(`not in time: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const lastOf = async (stream: string) => {
  const info = await nats.jsm.streams.info(stream);
  return info.state.messages > 0 ? await nats.jsm.streams.getMessage(stream, { seq: info.state.last_seq }) : undefined;
};

describe("trackhook deliver", () => {
  it("refuses a loopback webhook by default: no request, dead letter, attempt record private_address_refused", async () => {
    const code = await runDeliver([], async (ops, output) => {
      // Said at start, not only by the dead letters to come.
      expect(output()).toMatch(/"destination":"default\/local".*this webhook URL reaches only a private address, which delivery refuses/);
      expect((await fetch(`${ops}/healthz`)).status).toBe(200);
      expect(await (await fetch(`${ops}/readyz`)).json()).toEqual({ status: "ready" });
      const res = await post(`${ingest.url}/v1/track`, { userId: "u1", event: "To loopback", messageId: "ssrf-1" }, { headers: { authorization: basic("cli-key") } });
      expect(res.status).toBe(200);
      const letter = await until(() => lastOf(DLQ_STREAM), Boolean);
      expect(letter!.json()).toMatchObject({ messageId: "ssrf-1" });
      expect(letter!.header?.get("Trackhook-Reason")).toBe("permanent_failure");
      // Attempt records are published after the dead letter, without waiting for an ack.
      expect((await until(() => lastOf(ATTEMPTS_STREAM), Boolean))!.json()).toMatchObject({ messageId: "ssrf-1", error: "private_address_refused", outcome: "permanent" });
      expect(receiver.requests("/hook")).toHaveLength(0);
      const metricsText = await (await fetch(`${ops}/metrics`)).text();
      expect(metricsText).toContain('trackhook_delivery_attempts_total{destination="default/local",status_class="error",error="private_address_refused"} 1');
      expect(metricsText).toContain('trackhook_delivery_dead_letters{destination="default/local"} 1');
    });
    expect(code).toBe(0);
  });

  it("on SIGTERM, finishes the delivery in flight and acks it before exiting", async () => {
    receiver.on("/hook", (_req, _n, res) => void setTimeout(() => res.end("ok"), 1_500));
    let seenAt = 0;
    const code = await runDeliver(["--allow-private-networks"], async () => {
      const res = await post(`${ingest.url}/v1/track`, { userId: "u1", event: "Draining", messageId: "drain-1" }, { headers: { authorization: basic("cli-key") } });
      expect(res.status).toBe(200);
      await until(async () => receiver.requests("/hook").filter((r) => JSON.parse(r.body.toString()).messageId === "drain-1").length, (n) => n === 1);
      seenAt = Date.now(); // the request is at the receiver, its answer 1.5 s away: SIGTERM now
    });
    expect(code).toBe(0);
    expect(Date.now() - seenAt).toBeGreaterThan(1_000); // it waited for the answer
    const info = await nats.jsm.consumers.info("TRACKHOOK_EVENTS", "dest_default_local");
    expect(info.num_ack_pending).toBe(0); // acked, so never sent again
    receiver.on("/hook", (_req, _n, res) => void res.end("ok"));
  });

  it("delivers to it with --allow-private-networks, and exits 0 on SIGTERM", async () => {
    const code = await runDeliver(["--allow-private-networks"], async () => {
      const res = await post(`${ingest.url}/v1/track`, { userId: "u1", event: "Allowed", messageId: "allowed-1" }, { headers: { authorization: basic("cli-key") } });
      expect(res.status).toBe(200);
      const mine = await until(async () => receiver.requests("/hook").filter((r) => JSON.parse(r.body.toString()).messageId === "allowed-1"), (found) => found.length === 1);
      expect(JSON.parse(mine[0]!.body.toString())).toMatchObject({ messageId: "allowed-1", version: 1 });
    });
    expect(code).toBe(0);
  });

  it("with TRACKHOOK_EGRESS_PROXY, sends through that proxy, never printing its credentials; a bad --egress-proxy is a usage error", async () => {
    const proxy = await startProxy({ credentials: "team:s3cret" });
    try {
      const code = await runDeliver(["--allow-private-networks"], async (_ops, output) => {
        expect(output()).toMatch(/"proxy":"http:\/\/…@127\.0\.0\.1:\d+".*webhooks go through the egress proxy/);
        const res = await post(`${ingest.url}/v1/track`, { userId: "u1", event: "Proxied", messageId: "proxied-1" }, { headers: { authorization: basic("cli-key") } });
        expect(res.status).toBe(200);
        await until(async () => receiver.requests("/hook").filter((r) => JSON.parse(r.body.toString()).messageId === "proxied-1").length, (n) => n === 1);
        expect(proxy.requests).toEqual([expect.objectContaining({ method: "POST", target: receiver.url("/hook") })]);
        expect(output()).not.toContain("s3cret");
      }, { TRACKHOOK_EGRESS_PROXY: proxy.url });
      expect(code).toBe(0);
    } finally {
      await proxy.close();
    }
    const bad = spawnSync(process.execPath, [join(root, "cli/main.ts"), "deliver", "--config", configDir, "--nats", nats.server.url, "--egress-proxy", "socks5://u:s3cret@proxy:1080"], { cwd: root, encoding: "utf8", timeout: 20_000 });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--egress-proxy: socks5://…@proxy:1080 is not the http:// or https:// URL of a proxy");
    const stray = spawnSync(process.execPath, [join(root, "cli/main.ts"), "deliver", "--config", configDir, "--nats", nats.server.url, "--egress-no-proxy", "internal.example"], { cwd: root, encoding: "utf8", timeout: 20_000 });
    expect([stray.status, stray.stderr]).toEqual([2, expect.stringContaining("--egress-no-proxy lists hosts that bypass --egress-proxy, which is not given")]);
  });

  it("serves /healthz at once and answers /readyz 503 while NATS is not there yet", async () => {
    const port = await freePort();
    const child = spawn(process.execPath, [join(root, "cli/main.ts"), "deliver", "--config-from", "nats", "--nats", "nats://127.0.0.1:1", "--host", "127.0.0.1", "--port", String(port)], { cwd: root });
    try {
      const health = await until(async () => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.status, () => 0), (status) => status === 200);
      expect(health).toBe(200);
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toEqual({ status: "not_ready", reason: "starting: waiting for NATS" });
      // What an alert on NATS being unreachable reads, from the start (found by a review: no series until connected).
      expect(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()).toMatch(/^trackhook_nats_connected 0$/m);
    } finally {
      child.kill("SIGTERM");
      await new Promise((resolve) => child.once("exit", resolve));
    }
  });
});

describe("trackhook deliver started after the ingest", () => {
  it("on a fresh NATS, delivers what the ingest accepted before delivery first ran, whenever delivery's files were written (found by a VM install review: never delivered, then skipped for files written after the stream); delivery's copy of the files needs no write keys", async () => {
    const fresh = await startNats();
    const dir = tempDir("deliver-late");
    const hourAgo = new Date(Date.now() - 3_600_000);
    const early = await startIngest(fresh, { config: configFromYaml(yaml(receiver.url("/late"))) });
    try {
      for (const id of ["late-1", "late-2", "late-3"]) {
        const res = await post(`${early.url}/v1/track`, { userId: "u1", event: "Before delivery", messageId: id }, { headers: { authorization: basic("cli-key") } });
        expect(res.status).toBe(200);
      }
      // Delivery's own copy, written now (a VM provisioned after the ingest's), as on a VM of its
      // own: the Source without its write key's Secret.
      writeFileSync(join(dir, "config.yaml"), yaml(receiver.url("/late")).split("---").filter((doc) => !doc.includes("kind: Secret")).join("---"));
      const code = await runDeliver(["--allow-private-networks"], async (_ops, output) => {
        const ids = await until(async () => receiver.requests("/late").map((r) => JSON.parse(r.body.toString()).messageId as string), (got) => got.length >= 3);
        expect(ids.sort()).toEqual(["late-1", "late-2", "late-3"]);
        // Said, with how many it found waiting, by whichever process made the consumer.
        expect(output()).toMatch(/"pending":3.*the first delivery on this NATS/);

        // Once delivery has run, a destination added with a file as old (`cp -p`, rsync, tar)
        // gets what is stored from when it is read, not the whole stream (found by a review).
        const legacy = join(dir, ".legacy.yaml.tmp");
        writeFileSync(legacy, `apiVersion: trackhook.io/v1alpha1\nkind: WebhookDestination\nmetadata: { name: legacy }\nspec: { sources: [app], urls: ["${receiver.url("/legacy")}"] }\n`);
        utimesSync(legacy, hourAgo, hourAgo);
        renameSync(legacy, join(dir, "legacy.yaml"));
        await until(async () => output(), (text) => text.includes('"changes":["webhook default/legacy added"]'));
        // Delivery counts what it compiles: the destinations (found by a review: "sources: 0" read as unread Sources).
        expect(output()).toMatch(/"destinations":2,"changes":\["webhook default\/legacy added"\],"msg":"config reloaded"/);
        const res = await post(`${early.url}/v1/track`, { userId: "u1", event: "After legacy", messageId: "late-4" }, { headers: { authorization: basic("cli-key") } });
        expect(res.status).toBe(200);
        await until(async () => receiver.requests("/legacy").length, (n) => n >= 1);
        await new Promise((r) => setTimeout(r, 300));
        expect(receiver.requests("/legacy").map((r) => JSON.parse(r.body.toString()).messageId)).toEqual(["late-4"]);
      }, {}, { nats: fresh, configDir: dir });
      expect(code).toBe(0);
    } finally {
      await early.close();
      await fresh.stop();
    }
  });
});
