// `trackhook delete-user`: delete notifications reach the source's webhooks through the normal
// delivery path, in the spec's shape, and a request sent again with its id sends nothing twice.
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { deleteMessageId } from "../../dataplane/deletion/mod.ts";
import { useDelivery } from "../harness/delivery.ts";
import { basic, post } from "../harness/ingest.ts";
import { answer } from "../harness/receiver.ts";
import { tempDir } from "../harness/temp.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const CLI = join(root, "cli", "main.ts");
const env = useDelivery();

/**
 * The documents `--config` reads: Sources `shop` (with a webhook) and `quiet` (without); without
 * their write keys, as a delivery machine holds them. And a DeletionRequest, as a GitOps folder
 * keeps them (found by a parity review: delete-user refused such a folder).
 */
function configFile({ withKeys = true } = {}): string {
  const dir = tempDir("delete-user");
  writeFileSync(
    join(dir, "config.yaml"),
    `${withKeys ? "apiVersion: v1\nkind: Secret\nmetadata: { name: keys }\nstringData: { shop: key-shop, quiet: key-quiet }\n---\n" : ""}apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: shop }
spec: { writeKeySecretRef: { name: keys, key: shop } }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: quiet }
spec: { writeKeySecretRef: { name: keys, key: quiet } }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: hook }
spec: { sources: [shop], urls: ["${env.receiver.url("/deletes")}"] }
---
apiVersion: trackhook.io/v1alpha1
kind: DeletionRequest
metadata: { name: gdpr-2026-001 }
spec: { userIds: [u-9] }
`,
  );
  return dir;
}

const deleteUser = (config: string, ...args: string[]) =>
  spawnSync(process.execPath, [CLI, "delete-user", "--config", config, ...args, "--nats", env.nats.server.url], { cwd: root, encoding: "utf8", timeout: 20_000 });

describe("trackhook delete-user", () => {
  it("sends one delete notification per user, once per request id", async () => {
    env.addSource("shop");
    await env.setDestination("hook", { sources: ["shop"], urls: [env.receiver.url("/deletes")] });
    // A delivery machine's files, without the write keys (found by a VM install review: refused for them).
    const config = configFile({ withKeys: false });

    const first = deleteUser(config, "--source", "shop", "--user-id", "u-1", "--user-id", "u-2", "--request-id", "req-1");
    expect(first.stderr).toBe("request req-1 (to finish it if this run fails: --request-id req-1)\n");
    expect(first.stdout).toContain("request req-1: 2 delete notifications stored for default/shop");
    const received = await env.receiver.waitFor("/deletes", 2);
    const bodies = received.map((r) => JSON.parse(r.body.toString()) as Record<string, unknown>);
    expect(bodies.map((b) => b.userId).sort()).toEqual(["u-1", "u-2"]);
    for (const body of bodies) {
      expect(Object.keys(body).sort()).toEqual(["context", "messageId", "timestamp", "type", "userId"]);
      expect(body.type).toBe("delete");
      expect(body.context).toEqual({});
      expect(body.messageId).toBe(deleteMessageId("req-1", "default/shop", body.userId as string));
      expect(Number.isNaN(Date.parse(body.timestamp as string))).toBe(false);
    }

    const again = deleteUser(config, "--source", "default/shop", "--user-id", "u-1", "--user-id", "u-2", "--request-id", "req-1");
    expect(again.stdout).toContain("0 delete notifications stored for default/shop (2 already sent by this request before)");
    const scripted = deleteUser(config, "--source", "shop", "--user-id", "u-1", "--user-id", "u-2", "--request-id", "req-1", "--json");
    expect(scripted.status).toBe(0);
    expect(JSON.parse(scripted.stdout)).toEqual({
      source: "default/shop", requestId: "req-1", stored: 0, duplicates: 2, deadLettersRemoved: 0, deadLettersUntil: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
    await new Promise((r) => setTimeout(r, 500));
    expect(env.receiver.requests("/deletes")).toHaveLength(2);
  });

  it("removes the user's dead letters, which a replay would send again, and keeps the others' and the delete notifications (regression: replay re-sent an erased user's data)", async () => {
    env.receiver.on("/purge", answer(404)); // dead-letters everything at once
    const key = env.addSource("purge-src");
    await env.setDestination("purge-hook", { sources: ["purge-src"], urls: [env.receiver.url("/purge")] });
    for (const [userId, messageId] of [["alice", "p-alice"], ["bob", "p-bob"]] as const) {
      expect((await post(`${env.ingest.url}/v1/identify`, { userId, messageId, traits: { email: `${userId}@example.com` } }, { headers: { authorization: basic(key) } })).status).toBe(200);
    }
    await expect.poll(async () => (await env.deadLetters("purge-hook")).length, { timeout: 10_000 }).toBe(2);
    const dir = tempDir("delete-user");
    writeFileSync(join(dir, "config.yaml"), `apiVersion: v1
kind: Secret
metadata: { name: keys }
stringData: { purge: key-purge }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: purge-src }
spec: { writeKeySecretRef: { name: keys, key: purge } }
---
apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: purge-hook }
spec: { sources: [purge-src], urls: ["${env.receiver.url("/purge")}"] }
`);
    const before = Date.now();
    const result = deleteUser(dir, "--source", "purge-src", "--user-id", "alice");
    expect(result.stdout).toMatch(/1 delete notifications stored for default\/purge-src; 1 of their dead letters removed/);
    // The delete notification, refused by the 404 too, is dead-lettered in its turn: it stays, to be replayed.
    await expect.poll(async () => (await env.deadLetters("purge-hook")).map((d) => `${d.body.type}:${d.body.userId}`).sort(), { timeout: 10_000 })
      .toEqual(["delete:alice", "identify:bob"]);

    // A message of hers still being retried could become a dead letter later: the run said until
    // when (the retry window in force: 4h, cut to 90% of the test stream's 1h max_age), and a
    // --dead-letters-only run then removes it.
    const until = /still being retried can become dead letters until (\S+): run delete-user again then, for the same users with --dead-letters-only/.exec(result.stdout)?.[1];
    expect(Date.parse(until ?? "") - before).toBeGreaterThanOrEqual(0.9 * 3_600_000);
    expect(Date.parse(until ?? "") - Date.now()).toBeLessThanOrEqual(0.9 * 3_600_000);
    expect((await post(`${env.ingest.url}/v1/track`, { userId: "alice", messageId: "p-alice-late", event: "Late" }, { headers: { authorization: basic(key) } })).status).toBe(200);
    await expect.poll(async () => (await env.deadLetters("purge-hook")).length, { timeout: 10_000 }).toBe(3);
    const notifiedBefore = env.receiver.requests("/purge").filter((r) => JSON.parse(r.body.toString()).type === "delete").length;
    const late = deleteUser(dir, "--source", "purge-src", "--user-id", "alice", "--dead-letters-only");
    expect(late.status).toBe(0);
    expect(late.stdout).toBe("1 dead letters of the user removed from default/purge-src's destinations\n");
    expect(JSON.parse(deleteUser(dir, "--source", "purge-src", "--user-id", "alice", "--dead-letters-only", "--json").stdout)).toEqual({ source: "default/purge-src", deadLettersRemoved: 0 });
    expect((await env.deadLetters("purge-hook")).map((d) => `${d.body.type}:${d.body.userId}`).sort()).toEqual(["delete:alice", "identify:bob"]);
    await new Promise((r) => setTimeout(r, 300));
    expect(env.receiver.requests("/purge").filter((r) => JSON.parse(r.body.toString()).type === "delete")).toHaveLength(notifiedBefore);
    expect(deleteUser(dir, "--source", "purge-src", "--user-id", "alice", "--dead-letters-only", "--request-id", "r").stderr)
      .toContain("--dead-letters-only sends no notification: it takes no --request-id");
  });

  it("refuses a source with no enabled webhook, and an unknown source, sending nothing", () => {
    const config = configFile();
    const quiet = deleteUser(config, "--source", "quiet", "--user-id", "u-1");
    expect(quiet.status).toBe(1);
    expect(quiet.stderr).toContain("Source default/quiet has no enabled WebhookDestination: nobody to notify, nothing sent");
    const unknown = deleteUser(config, "--source", "nope", "--user-id", "u-1");
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain("no Source default/nope in");
    const spaced = deleteUser(config, "--source", "shop", "--user-id", "alice ");
    expect(spaced.status).toBe(2);
    expect(spaced.stderr).toContain('--user-id "alice ": no whitespace at either end and no control characters');
    const none = deleteUser(config, "--source", "shop");
    expect(none.status).toBe(2);
    expect(none.stderr).toContain("--user-id <id> is required");
    expect(deleteUser(configFile({ withKeys: false }), "--source", "nope", "--user-id", "u-1").stderr).toContain("no Source default/nope in");
  });
});
