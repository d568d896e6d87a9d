// The signature-verifying receivers in docs/receiving-webhooks.md, run as they are printed there
// (Node.js, Python, Go), against real deliveries: each accepts what trackhook signs, and refuses a
// body with a signature that does not match it, or none.
import { spawn, type ChildProcess } from "node:child_process";
import { createHmac, randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { basic, post } from "../harness/ingest.ts";
import { useDelivery } from "../harness/delivery.ts";
import { freePort } from "../harness/ports.ts";
import { tempDir } from "../harness/temp.ts";

const env = useDelivery();

const DOC = fileURLToPath(new URL("../../docs/receiving-webhooks.md", import.meta.url));
const NODE_MODULES = fileURLToPath(new URL("../../node_modules", import.meta.url));
const SECRET = "receiver-docs-secret";
/** Standard Webhooks secrets are base64 keys with a whsec_ prefix. */
const STANDARD_SECRET = `whsec_${Buffer.from("receiver-docs-standard-key-32by").toString("base64")}`;

/** The fenced code blocks whose first line says `receiver: <language>`. */
function receivers(markdown: string): Map<string, string> {
  const found = new Map<string, string>();
  for (const [, code] of markdown.matchAll(/^```\w+\n([\s\S]*?)^```$/gm)) {
    const language = /^(?:\/\/|#) receiver: ([\w-]+)\n/.exec(code!)?.[1];
    if (language) found.set(language, code!);
  }
  return found;
}

const RUN: Record<string, { file: string; command: (file: string) => [string, string[]] }> = {
  node: { file: "receiver.cjs", command: (file) => [process.execPath, [file]] },
  "node-standard-webhooks": { file: "receiver.cjs", command: (file) => [process.execPath, [file]] },
  python: { file: "receiver.py", command: (file) => ["python3", [file]] },
  go: { file: "main.go", command: (file) => ["go", ["run", file]] },
};

const dir = tempDir("receiver-docs");
const children: ChildProcess[] = [];
afterAll(() => {
  // Each receiver leads a process group of its own: `go run` leaves the program it built running
  // when only `go` itself is killed.
  for (const child of children) {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // already gone
    }
  }
});

/** Starts a receiver from the docs; resolves with its URL and what it printed so far, once it accepts connections. */
async function start(language: string, code: string, secret = SECRET): Promise<{ url: string; output: () => string }> {
  const { file, command } = RUN[language]!;
  const path = join(dir, `${language}-${file}`);
  writeFileSync(path, code);
  const port = await freePort();
  const [cmd, args] = command(path);
  // NODE_PATH: the snippet's require("standardwebhooks") finds the project's dev dependency.
  // GOTMPDIR: `go run` builds in a work directory it removes on exit, which SIGKILL skips; inside
  // `dir` it goes with the rest.
  const child = spawn(cmd, args, { cwd: dir, env: { ...process.env, SECRET: secret, PORT: String(port), NODE_PATH: NODE_MODULES, GOTMPDIR: dir }, stdio: ["ignore", "pipe", "pipe"], detached: true });
  children.push(child);
  let output = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => (output += c));
  child.stderr!.setEncoding("utf8").on("data", (c: string) => (output += c));
  // `go run` compiles first: seconds, more on a cold build cache.
  const deadline = Date.now() + 90_000;
  while (!(await accepts(port))) {
    if (child.exitCode !== null) throw new Error(`the ${language} receiver exited (${child.exitCode}): ${output}`);
    if (Date.now() > deadline) throw new Error(`the ${language} receiver did not listen on ${port}: ${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url: `http://127.0.0.1:${port}/hook`, output: () => output };
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, "127.0.0.1", () => {
      socket.destroy();
      resolve(true);
    }).on("error", () => resolve(false));
  });

const sign = (body: string, secret = SECRET) => createHmac("sha1", secret).update(body).digest("hex");

describe("docs/receiving-webhooks.md", () => {
  const code = receivers(readFileSync(DOC, "utf8"));

  it("has a receiver in Node.js, Python and Go, and one with the Standard Webhooks library", () => {
    expect([...code.keys()].sort()).toEqual(["go", "node", "node-standard-webhooks", "python"]);
  });

  it.each(["node", "python", "go"])("the %s receiver verifies what trackhook signs and refuses the rest", async (language) => {
    const receiver = await start(language, code.get(language)!);

    const key = env.addSource(`docs-${language}`);
    await env.setDestination(`docs-${language}-hook`, { sources: [`docs-${language}`], urls: [receiver.url], secret: SECRET });
    const messageId = `docs-${language}-1`;
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u1", event: "Docs Checked", messageId }, { headers: { authorization: basic(key) } });
    expect(res.status).toBe(200);
    await expect.poll(() => receiver.output(), { timeout: 15_000, interval: 50 }).toContain(`verified track ${messageId} `);
    // It printed the delivery id trackhook sent, and trackhook saw a 2xx: no retry, no dead letter.
    expect(receiver.output()).toMatch(new RegExp(`verified track ${messageId} \\S+`));
    expect(await env.deadLetters(`docs-${language}-hook`)).toEqual([]);

    // Straight to the receiver: a matching signature passes, a wrong one, another secret's or none does not.
    const body = JSON.stringify({ type: "track", messageId: "direct-1", event: "Direct" });
    const attempt = (headers: Record<string, string>, sent = body) =>
      fetch(receiver.url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: sent }).then((r) => r.status);
    expect(await attempt({ "x-signature": sign(body), "x-delivery-id": "d-1" })).toBe(200);
    expect(await attempt({ "x-signature": sign(body, "another-secret") })).toBe(401);
    expect(await attempt({ "x-signature": sign(body) }, body.replace("Direct", "Forged"))).toBe(401);
    expect(await attempt({ "x-signature": sign(body).slice(0, 20) })).toBe(401);
    expect(await attempt({ "x-signature": "not hex" })).toBe(401);
    expect(await attempt({ "x-signature": "é" })).toBe(401);
    expect(await attempt({})).toBe(401);
    // Over 1 MiB: refused without being kept.
    const huge = JSON.stringify({ type: "track", messageId: "huge", pad: "x".repeat(1024 * 1024) });
    expect(await attempt({ "x-signature": sign(huge) }, huge)).toBe(413);
    // A client that connects and sends nothing does not hold up the next request.
    const idle = connect(Number(new URL(receiver.url).port), "127.0.0.1");
    await new Promise((r) => idle.once("connect", r));
    try {
      expect(await attempt({ "x-signature": sign(body), "x-delivery-id": "d-2" })).toBe(200);
    } finally {
      idle.destroy();
    }
  }, 120_000);

  it("the Standard Webhooks receiver verifies what trackhook signs with standardWebhooks: true, and refuses the rest", async () => {
    const receiver = await start("node-standard-webhooks", code.get("node-standard-webhooks")!, STANDARD_SECRET);
    const key = env.addSource("docs-standard");
    await env.setDestination("docs-standard-hook", { sources: ["docs-standard"], urls: [receiver.url], secret: STANDARD_SECRET, standardWebhooks: true });
    const messageId = "docs-standard-1";
    const res = await post(`${env.ingest.url}/v1/track`, { userId: "u1", event: "Docs Checked", messageId }, { headers: { authorization: basic(key) } });
    expect(res.status).toBe(200);
    await expect.poll(() => receiver.output(), { timeout: 15_000, interval: 50 }).toContain(`verified track ${messageId} `);
    expect(await env.deadLetters("docs-standard-hook")).toEqual([]);

    // Straight to the receiver: the library refuses a forged body, another key's signature, an old timestamp.
    const body = JSON.stringify({ type: "track", messageId: "direct-1", event: "Direct" });
    const keyBytes = Buffer.from(STANDARD_SECRET.slice("whsec_".length), "base64");
    const headers = (id: string, at: number, signed = body, keyed = keyBytes) => ({
      "content-type": "application/json", "webhook-id": id, "webhook-timestamp": String(at),
      "webhook-signature": `v1,${createHmac("sha256", keyed).update(`${id}.${at}.${signed}`).digest("base64")}`,
    });
    const attempt = (h: Record<string, string>, sent = body) => fetch(receiver.url, { method: "POST", headers: h, body: sent }).then((r) => r.status);
    const now = Math.floor(Date.now() / 1000);
    expect(await attempt(headers(randomUUID(), now))).toBe(200);
    expect(await attempt(headers(randomUUID(), now), body.replace("Direct", "Forged"))).toBe(401);
    expect(await attempt(headers(randomUUID(), now, body, Buffer.from("another key")))).toBe(401);
    expect(await attempt(headers(randomUUID(), now - 3600))).toBe(401);
  }, 120_000);
});
