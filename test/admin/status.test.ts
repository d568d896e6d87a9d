// `trackhook status` (readStatus): per destination what waits and since when, its dead letters and
// its last attempt, against a real nats-server, the real ingest, the delivery service and a real
// HTTP receiver; then the command's text, JSON and selections.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { readStatus, type DeliveryStatus, type DestinationStatus } from "../../dataplane/admin/mod.ts";
import { AckPolicy, DeliverPolicy } from "@nats-io/jetstream";
import { EVENTS_STREAM, consumerName, dlqSubject, sourceSubjects } from "../../dataplane/nats/mod.ts";
import { bytes, span } from "../../cli/commands/status.ts";
import { useDelivery } from "../harness/delivery.ts";
import { basic, post } from "../harness/ingest.ts";
import { answer } from "../harness/receiver.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const cli = (...args: string[]) => spawnSync(process.execPath, [join(root, "cli", "main.ts"), ...args, "--nats", env.nats.server.url], { cwd: root, encoding: "utf8", timeout: 20_000 });

const env = useDelivery();

const send = async (key: string, messageId: string) => {
  const res = await post(`${env.ingest.url}/v1/track`, { userId: "u", event: "Status", messageId }, { headers: { authorization: basic(key) } });
  expect(res.status).toBe(200);
};
const find = (status: DeliveryStatus, name: string): DestinationStatus | undefined => status.destinations.find((d) => d.destination === `default/${name}`);

describe("spans and sizes as the text shows them", () => {
  it("rounds a span to the second under an hour, to the minute under two days, then to days and hours", () => {
    expect([span(0), span(999), span(1_499), span(61_600), span(3 * 3_600_000 + 29 * 60_000 + 31_000), span(50 * 3_600_000), span(72 * 3_600_000)])
      .toEqual(["<1s", "<1s", "1s", "1m2s", "3h30m", "2d2h", "3d"]);
  });
  it("gives sizes in binary units", () => {
    expect([bytes(0), bytes(1023), bytes(1536), bytes(10 * 1024 ** 3), bytes(150 * 1024 ** 2)]).toEqual(["0 B", "1023 B", "1.5 KB", "10 GB", "150 MB"]);
  });
});

describe("the status of destinations", () => {
  it("tells a receiver that answers 200, one that answers 503 (in progress, since the first send), and one that refuses (dead letters), each with its last answer", async () => {
    const key = env.addSource("status-src");
    env.receiver.on("/status-fail", answer(503));
    env.receiver.on("/status-refuse", answer(404));
    await env.setDestination("status-ok", { sources: ["status-src"], urls: [env.receiver.url("/status-ok")] });
    await env.setDestination("status-fail", { sources: ["status-src"], urls: [env.receiver.url("/status-fail")], retryWindow: "1h" });
    await env.setDestination("status-refuse", { sources: ["status-src"], urls: [env.receiver.url("/status-refuse")] });
    const before = Date.now();
    await send(key, "s-1");
    const afterFirst = Date.now();
    for (const id of ["s-2", "s-3"]) await send(key, id);
    await env.receiver.waitFor("/status-ok", 3);
    await env.receiver.waitFor("/status-fail", 3);
    await expect.poll(async () => (await env.deadLetters("status-refuse")).length, { timeout: 15_000 }).toBe(3);

    // Attempt records and acks leave with the worker's next turn: wait until the last are in.
    await expect.poll(async () => {
      const status = await readStatus(env.nc);
      return ["status-ok", "status-refuse"].map((name) => [find(status, name)?.lastAttempts?.[0]?.status, find(status, name)?.inProgress]);
    }, { timeout: 10_000 }).toEqual([[200, 0], [404, 0]]);
    const status = await readStatus(env.nc);
    // The harness's ingest makes the events stream with max_age 1h and max_bytes 256 MB.
    expect(status.events).toMatchObject({ name: "TRACKHOOK_EVENTS", maxAgeMs: 3_600_000, maxBytes: 256 * 1024 ** 2 });
    expect(status.events!.messages).toBeGreaterThanOrEqual(3);
    expect(status.deadLetterQueue!.messages).toBeGreaterThanOrEqual(3);

    // A delivery is running: its pull is open.
    expect(find(status, "status-ok")).toMatchObject({ consumer: true, waiting: 0, inProgress: 0, deliveryPulling: true, deadLetters: 0, lastAttempts: [{ url: env.receiver.url("/status-ok"), status: 200 }] });
    expect(find(status, "status-ok")).not.toHaveProperty("oldestUndeliveredAt");
    expect(find(status, "status-ok")!.lastAttempts![0]).not.toHaveProperty("destination");

    const failing = find(status, "status-fail")!;
    expect(failing).toMatchObject({ consumer: true, waiting: 0, inProgress: 3, deadLetters: 0, lastAttempts: [{ status: 503 }] });
    // The oldest of the three waits since it was stored: during the first send.
    const oldest = Date.parse(failing.oldestUndeliveredAt!);
    expect(oldest).toBeGreaterThanOrEqual(before);
    expect(oldest).toBeLessThanOrEqual(afterFirst);

    const refusing = find(status, "status-refuse")!;
    expect(refusing).toMatchObject({ consumer: true, waiting: 0, inProgress: 0, deadLetters: 3, lastAttempts: [{ status: 404 }] });
    expect(Date.parse(refusing.lastDeadLetterAt!)).toBeGreaterThanOrEqual(before - 1000);
    expect(refusing.lastDoneAt).toBeDefined();

    // Taken out of the config, its consumer removed (the operator at once, `deliver --config` a
    // minute later): its dead letters are still there to replay.
    env.remove("WebhookDestination", "status-refuse");
    await env.nats.jsm.consumers.delete(EVENTS_STREAM, consumerName("default", "status-refuse"));
    expect(find(await readStatus(env.nc), "status-refuse")?.consumer).toBe(false);
    expect(find(await readStatus(env.nc), "status-refuse")).toMatchObject({ deadLetters: 3, lastAttempts: [{ status: 404 }] });
    expect(find(await readStatus(env.nc), "status-refuse")).not.toHaveProperty("waiting");
  });

  it("gives the last answer of each URL, not only of the URL written last (found by a review: a backup URL's 404 hid the main one's 200)", async () => {
    const key = env.addSource("two-src");
    env.receiver.on("/two-refuse", answer(404));
    await env.setDestination("status-two", { sources: ["two-src"], urls: [env.receiver.url("/two-ok"), env.receiver.url("/two-refuse")] });
    await send(key, "t-1");
    // One 2xx delivers the message: nothing is tried again, and the 404 stays the second URL's last answer.
    await env.receiver.waitFor("/two-ok", 1);
    await env.receiver.waitFor("/two-refuse", 1);
    await expect.poll(async () => find(await readStatus(env.nc), "status-two")?.lastAttempts?.map((a) => [a.url, a.status]), { timeout: 10_000 }).toEqual([
      [env.receiver.url("/two-ok"), 200],
      [env.receiver.url("/two-refuse"), 404],
    ]);
  });

  it("tells a consumer no delivery asks for messages from one being delivered", async () => {
    // A consumer no delivery process reads: one whose deliver or dev stopped, or left out of its config.
    const key = env.addSource("idle-src");
    await env.nats.jsm.consumers.add(EVENTS_STREAM, { durable_name: consumerName("default", "status-idle"), filter_subjects: [sourceSubjects("default", "idle-src")], ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.New });
    await send(key, "i-1");
    const idle = find(await readStatus(env.nc), "status-idle");
    expect(idle).toMatchObject({ consumer: true, waiting: 1, inProgress: 0, deliveryPulling: false });
    const text = cli("status");
    expect(text.stdout).toMatch(/\ndefault\/status-idle +1 \(!\) +0 +\S+ +0 +-\n/);
    expect(text.stdout).toContain("(!) no delivery is asking for the messages of default/status-idle: is `dev` or `deliver` running with it in its config?");
    await env.nats.jsm.consumers.delete(EVENTS_STREAM, consumerName("default", "status-idle"));
  });

  it("selects one destination, or a namespace's (one known by its dead letters only included)", async () => {
    // Dead letters of a destination of another namespace, as delivery stores them.
    await env.nats.js.publish(dlqSubject("team-b", "orders"), JSON.stringify({ type: "track", messageId: "b-1" }));
    const teamB = await readStatus(env.nc, { namespace: "team-b" });
    expect(teamB.destinations).toEqual([{ destination: "team-b/orders", consumer: false, deadLetters: 1, lastDeadLetterAt: expect.any(String) }]);
    const everything = await readStatus(env.nc);
    expect(everything.destinations.map((d) => d.destination)).toEqual(expect.arrayContaining(["team-b/orders", "default/status-ok"]));
    // Ordered by namespace and name.
    expect(everything.destinations.map((d) => d.destination)).toEqual([...everything.destinations.map((d) => d.destination)].sort());
    expect((await readStatus(env.nc, { namespace: "default" })).destinations.map((d) => d.destination)).not.toContain("team-b/orders");

    const one = await readStatus(env.nc, { namespace: "default", destination: "status-ok" });
    expect(one.destinations.map((d) => d.destination)).toEqual(["default/status-ok"]);
    // A name nothing is known of is answered too, as no consumer.
    expect((await readStatus(env.nc, { namespace: "default", destination: "no-such" })).destinations).toEqual([{ destination: "default/no-such", consumer: false, deadLetters: 0 }]);
    await expect(readStatus(env.nc, { namespace: "default", destination: "a.b" })).rejects.toThrow(/not a DNS label/);
  });
});

describe("`trackhook status`", () => {
  it("prints the streams' fill and a row per destination; --json the same as one object; --destination and --namespace select", async () => {
    const text = cli("status");
    expect([text.status, text.stderr]).toEqual([0, ""]);
    const lines = text.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^events: [\d,]+ messages, [\d.]+ [KM]?B of 256 MB \(0%\), the oldest stored \S+ ago, kept 1h$/);
    expect(lines[1]).toMatch(/^dead-letter queue: [\d,]+ messages?, .* kept 14d$/);
    expect(lines[3]).toMatch(/^DESTINATION +WAITING +IN PROGRESS +OLDEST UNDELIVERED +DEAD LETTERS +LAST ATTEMPT$/);
    expect(lines.find((l) => l.startsWith("default/status-ok "))).toMatch(/^default\/status-ok +0 +0 +- +0 +\S+ ago: 200 in \d+ ms http:\/\/127\.0\.0\.1:\d+\/status-ok$/);
    expect(lines.find((l) => l.startsWith("default/status-fail "))).toMatch(/^default\/status-fail +0 +3 +\S+ +0 +\S+ ago: 503 in \d+ ms /);
    expect(lines.find((l) => l.startsWith("default/status-two "))).toMatch(/ago: 200 in \d+ ms http:\/\/127\.0\.0\.1:\d+\/two-ok; 404 in \d+ ms http:\/\/127\.0\.0\.1:\d+\/two-refuse$/);
    expect(lines.find((l) => l.startsWith("default/status-refuse "))).toMatch(/^default\/status-refuse +no consumer +- +- +3 \(last \S+ ago\) +\S+ ago: 404 /);
    expect(lines.find((l) => l.startsWith("team-b/orders "))).toMatch(/^team-b\/orders +no consumer +- +- +1 \(last \S+ ago\) +-$/);

    const json = cli("status", "--json");
    expect([json.status, json.stderr]).toEqual([0, ""]);
    const parsed = JSON.parse(json.stdout) as DeliveryStatus;
    expect(parsed.destinations.map((d) => d.destination)).toEqual(lines.slice(4).map((l) => l.split(" ")[0]));
    expect(parsed.destinations.find((d) => d.destination === "default/status-fail")).toMatchObject({ inProgress: 3, lastAttempts: [{ status: 503 }] });

    const one = cli("status", "--destination", "status-fail");
    expect(one.stdout.trimEnd().split("\n").slice(4).map((l) => l.split(" ")[0])).toEqual(["default/status-fail"]);
    const teamB = cli("status", "--namespace", "team-b", "--json");
    expect((JSON.parse(teamB.stdout) as DeliveryStatus).destinations.map((d) => d.destination)).toEqual(["team-b/orders"]);
    const empty = cli("status", "--namespace", "team-c");
    expect([empty.status, empty.stdout.trimEnd().split("\n").at(-1)]).toEqual([0, "no destination of namespace team-c is delivered to or has dead letters"]);
  });

  it("says when nothing is known of the destination asked for, and refuses a bad selection", () => {
    const unknown = cli("status", "--destination", "nope");
    expect(unknown.status).toBe(0);
    expect(unknown.stdout).toMatch(/\ndefault\/nope +no consumer +- +- +0 +-\n$/);
    expect(unknown.stderr).toMatch(/^nothing is known of default\/nope: no consumer, dead letters or attempts\. Is the name right .*\? Or it is disabled, or no `dev` or `deliver` has started it yet\n$/);
    const both = cli("status", "--destination", "a", "--namespace", "b");
    expect([both.status, both.stderr]).toEqual([2, "trackhook: --destination and --namespace: give one (--destination takes <namespace>/<name>)\n"]);
    const bad = cli("status", "--namespace", "Team_B");
    expect([bad.status, bad.stderr]).toEqual([2, "trackhook: --namespace: \"Team_B\" is not a namespace (lowercase letters, digits and \"-\")\n"]);
  });
});
