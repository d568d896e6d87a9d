// docs/nats-permissions.conf, for real: nats-server runs with it, and each component works with
// its own user's permissions alone: the operator writes the config bucket, ingest stores a
// message, delivery delivers it signed and acks it. And ingest, which faces the internet, cannot
// read a destination's entry (its shared secret) nor delivery forge an event.
//
// Twice: with the ack and flow-control subjects nats-server uses by default, and with the "v2"
// ones (`$JS.ACK.<domain>.<account hash>.<stream>...`) that the feature flag js_ack_fc_v2 turns on
// since 2.14 and that NATS means to make the default.
import { createHmac } from "node:crypto";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, headers, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CONFIG_BUCKET, ConfigWriter, KvConfigProvider, destinationKey, ensureConfigBucket, sha256Hex, sourceKey } from "../../dataplane/config/mod.ts";
import { DeliveryMetrics, DeliveryService, WebhookSender, deadLetterUndelivered, ensureDestinationConsumer } from "../../dataplane/delivery/mod.ts";
import { buildIngestApp } from "../../dataplane/ingest/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { EVENTS_STREAM, INBOX_PREFIX, LocalNatsServer, attemptsStreamConfig, connectNats, consumerName, dlqStreamConfig, ensureStream, eventsStreamConfig } from "../../dataplane/nats/mod.ts";
import type { CompiledDestination, CompiledSource } from "../../schema/mod.ts";
import { DEFAULT_STREAM, WRITE_KEY, basic } from "../harness/ingest.ts";
import { startReceiver, type Receiver } from "../harness/receiver.ts";
import { repoRoot } from "../harness/control-plane.ts";
import { tempDir } from "../harness/temp.ts";

const log = createLogger({ level: "silent" });
const PASSWORDS = { ingest: "ingest-pw", delivery: "delivery-pw", operator: "operator-pw", admin: "admin-pw" } as const;
const TEAM_PASSWORD = "team-a-pw";
const deadLetterHeaders = (reason: string) => {
  const h = headers();
  h.set("Trackhook-Reason", reason);
  return h;
};
describe.each([
  { format: "default ack subjects", serverSettings: "" },
  { format: "v2 ack subjects (js_ack_fc_v2)", serverSettings: "feature_flags { js_ack_fc_v2: true }" },
])("with $format", ({ serverSettings }) => {
  let server: LocalNatsServer;
  let store: string;
  let receiver: Receiver;
  const connections: NatsConnection[] = [];
  const as = async (component: keyof typeof INBOX_PREFIX) => {
    // With the component's own inbox prefix, as connectNats makes it.
    const nc = await connect({ servers: server.url, user: `trackhook-${component}`, pass: PASSWORDS[component], inboxPrefix: INBOX_PREFIX[component], noAsyncTraces: true });
    connections.push(nc);
    return nc;
  };

  const source: CompiledSource = { namespace: "default", name: "web", enabled: true, writeKeySha256: sha256Hex(WRITE_KEY) };
  let destination: CompiledDestination;

  beforeAll(async () => {
    for (const [component, password] of Object.entries(PASSWORDS)) process.env[`TRACKHOOK_${component.toUpperCase()}_PASSWORD`] = password;
    process.env.TRACKHOOK_TEAM_A_PASSWORD = TEAM_PASSWORD;
    store = tempDir("nats-perms");
    // The documented file included as its comment says (nats-server reads includes relative to
    // the including file), with the team's admin user uncommented as its comment says.
    writeFileSync(join(store, "nats-permissions.conf"), withTeamAdmin(readFileSync(join(repoRoot, "docs", "nats-permissions.conf"), "utf8")));
    const config = join(store, "nats.conf");
    writeFileSync(config, `include ./nats-permissions.conf\n${serverSettings}\n`);
    server = await LocalNatsServer.start({ storeDir: store, binary: process.env.TRACKHOOK_TEST_NATS_SERVER || undefined, args: ["-c", config] });
    receiver = await startReceiver();
    destination = {
      namespace: "default", name: "crm", enabled: true, sources: ["web"], urls: [receiver.url("/crm")], headers: [],
      sharedSecret: "s3cret-not-for-ingest", timeoutMs: 5000, retryWindowMs: 3_600_000, maxInFlight: 10, standardWebhooks: false,
      createdAt: new Date(Date.now() - 1000).toISOString(), // so the message stored before its consumer is delivered
    };
  });
  afterAll(async () => {
    await Promise.all(connections.map((nc) => nc.close().catch(() => {})));
    await receiver?.close();
    await server?.stop();
    rmSync(store, { recursive: true, force: true });
  });

  describe("docs/nats-permissions.conf", () => {
    it("is a valid include as shipped (found by a review: a block no user named made nats-server refuse it)", () => {
      const dir = tempDir("nats-perms-as-shipped");
      try {
        writeFileSync(join(dir, "nats-permissions.conf"), readFileSync(join(repoRoot, "docs", "nats-permissions.conf")));
        writeFileSync(join(dir, "nats.conf"), "port: -1\ninclude ./nats-permissions.conf\n");
        const checked = spawnSync(server.binary, ["-t", "-c", join(dir, "nats.conf")], { encoding: "utf8", timeout: 10_000 });
        expect([checked.status, checked.stderr + checked.stdout]).toEqual([0, expect.stringContaining("is valid")]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("lets each component do its work with its own user, end to end", async () => {
      // The operator: the bucket and its entries.
      const writer = new ConfigWriter(await ensureConfigBucket(await as("operator")));
      await writer.put(sourceKey("default", "web"), source);
      await writer.put(destinationKey("default", "crm"), destination);

      // Ingest: its stream, the Sources of the bucket (and only those), a stored message.
      const ingestNc = await as("ingest");
      await ensureStream(await jetstreamManager(ingestNc), eventsStreamConfig(DEFAULT_STREAM));
      const ingestConfig = await KvConfigProvider.start(ingestNc, log, { retryMs: 50, part: "sources" });
      expect(ingestConfig.current()).toEqual({ sources: [source], destinations: [] });
      const app = await buildIngestApp({ nc: ingestNc, config: ingestConfig });
      const res = await app.inject({ method: "POST", url: "/v1/track", headers: { authorization: basic(WRITE_KEY), "content-type": "application/json" }, payload: { userId: "u1", event: "Allowed", messageId: "perm-1" } });
      expect(res.json()).toEqual({ success: true });

      // Delivery: the destinations (and only those), the message delivered and signed.
      const deliveryNc = await as("delivery");
      const deliveryConfig = await KvConfigProvider.start(deliveryNc, log, { retryMs: 50, part: "destinations" });
      expect(deliveryConfig.current()).toEqual({ sources: [], destinations: [destination] });
      const sender = new WebhookSender({ allowPrivateNetworks: true, userAgent: "trackhook/test" });
      const service = await DeliveryService.start({ nc: deliveryNc, config: deliveryConfig, sender, log, metrics: new DeliveryMetrics({ defaultMetrics: false }) });
      try {
        const [request] = await receiver.waitFor("/crm", 1);
        expect(JSON.parse(request!.body.toString())).toMatchObject({ messageId: "perm-1", event: "Allowed" });
        expect(request!.headers["x-signature"]).toBe(createHmac("sha1", destination.sharedSecret!).update(request!.body).digest("hex"));
        // And acked: an ack the server refuses goes unnoticed by the client, and the message comes
        // back after ack_wait to be sent again and again.
        const jsm = await jetstreamManager(await as("operator"));
        await expect.poll(async () => (await jsm.consumers.info(EVENTS_STREAM, consumerName("default", "crm"))).ack_floor.stream_seq, { timeout: 5000 }).toBe(1);
      } finally {
        await service.stop();
        await sender.close();
        await app.close();
        ingestConfig.close();
        deliveryConfig.close();
      }
    });

    it("lets the operator and delivery move a removed destination's undelivered delete notifications to the DLQ (found by a review: both were refused)", async () => {
      const operatorNc = await as("operator");
      const gone: CompiledDestination = { ...destination, name: "gone", createdAt: new Date().toISOString() };
      await ensureDestinationConsumer(await jetstreamManager(operatorNc), gone);
      await jetstream(operatorNc).publish("trackhook.events.default.web.delete", JSON.stringify({ type: "delete", userId: "u-gone", messageId: "delete-gone", context: {} }), { msgID: "default/web/delete-gone" });
      for (const component of ["operator", "delivery"] as const) {
        const nc = await as(component);
        const moved = await deadLetterUndelivered(await jetstreamManager(nc), jetstream(nc), consumerName("default", "gone"), "destination_deleted");
        expect(moved, component).toEqual({ deletes: 1, replayed: 0 });
      }
      // Moved twice, stored once (the same dead-letter key).
      const dlq = await (await jetstreamManager(operatorNc)).streams.info("TRACKHOOK_DLQ", { subjects_filter: "trackhook.dlq.default.gone" });
      expect((dlq.state.subjects as Record<string, number>)["trackhook.dlq.default.gone"]).toBe(1);
    });

    it("keeps destination entries (shared secrets) from ingest", async () => {
      const nc = await as("ingest");
      const kv = await new Kvm(nc).open(CONFIG_BUCKET);
      await expect(kv.get(destinationKey("default", "crm"))).rejects.toThrow(/Permissions Violation/);
      await expect(kv.watch({ key: "destination.>" })).rejects.toThrow(/Permissions Violation/);
      await expect(kv.watch({ key: ">" })).rejects.toThrow(/Permissions Violation/);
    });

    it("keeps ingest from other components' inboxes, where delivery's KV watch brings the shared secrets (regression: all shared _INBOX.>)", async () => {
      const nc = await as("ingest");
      for (const subject of ["_INBOX.>", `${INBOX_PREFIX.delivery}.>`, `${INBOX_PREFIX.operator}.>`, ">"]) {
        const snoop = nc.subscribe(subject);
        await expect((async () => {
          for await (const m of snoop) return m.subject;
        })(), subject).rejects.toThrow(/Permissions Violation for Subscription/);
      }
    });

    it("says in the log, once per interval, when NATS refuses what the user is not permitted (regression: a line with no reason per refused ack)", async () => {
      const lines: Array<Record<string, unknown>> = [];
      const logger = createLogger({ level: "info", destination: { write: (line) => void lines.push(JSON.parse(line)) } });
      process.env.TRACKHOOK_NATS_USER = "trackhook-ingest";
      process.env.TRACKHOOK_NATS_PASSWORD = PASSWORDS.ingest;
      try {
        const nc = await connectNats({ servers: server.url, name: "refused", log: logger, component: "ingest" });
        connections.push(nc);
        for (let i = 0; i < 5; i++) nc.publish(`trackhook.dlq.default.crm.${i}`, "{}");
        await nc.flush();
        await expect.poll(() => lines.filter((l) => l.nats === "error").length).toBe(1);
        await new Promise((resolve) => setTimeout(resolve, 200)); // the other four, held back
        const refused = lines.filter((l) => l.nats === "error");
        expect(refused).toHaveLength(1);
        expect(refused[0]).toMatchObject({ level: 50, err: 'Permissions Violation for Publish to "trackhook.dlq.default.crm.0"' });
        expect(refused[0]!.msg).toContain("docs/nats-permissions.conf");
      } finally {
        delete process.env.TRACKHOOK_NATS_USER;
        delete process.env.TRACKHOOK_NATS_PASSWORD;
      }
    });

    it("lets a team's admin user (TRACKHOOK_TEAM_A_ADMIN) list its namespace's dead letters and attempts, and nobody else's", async () => {
      // Streams as delivery makes them; a dead letter and an attempt record in each of two namespaces.
      const deliveryNc = await as("delivery");
      const djsm = await jetstreamManager(deliveryNc);
      await ensureStream(djsm, dlqStreamConfig({ maxBytes: 64 * 1024 ** 2, replicas: 1 }));
      await ensureStream(djsm, attemptsStreamConfig({ maxBytes: 64 * 1024 ** 2, replicas: 1 }));
      const js = jetstream(deliveryNc);
      for (const ns of ["team-a", "team-b"]) {
        await js.publish(`trackhook.dlq.${ns}.hook`, JSON.stringify({ type: "track", event: "E", userId: "u", messageId: `dead-${ns}` }), { headers: deadLetterHeaders("retry_window_exhausted") });
        await js.publish(`trackhook.attempts.${ns}.hook`, JSON.stringify({ messageId: `tried-${ns}`, url: "https://hooks.example.com/in", attempt: 1, outcome: "retry", status: 500, latencyMs: 3, at: new Date().toISOString() }));
      }
      const cli = (prefix: string | undefined, ...args: string[]) => spawnSync(process.execPath, [join(repoRoot, "cli", "main.ts"), ...args, "--nats", server.url], {
        encoding: "utf8", timeout: 20_000,
        env: { ...process.env, TRACKHOOK_NATS_USER: "team-a", TRACKHOOK_NATS_PASSWORD: TEAM_PASSWORD, ...(prefix ? { TRACKHOOK_NATS_INBOX_PREFIX: prefix } : {}) },
      });
      const own = cli("_INBOX_team_a", "dead-letters", "--destination", "team-a/hook");
      expect([own.status, own.stderr]).toEqual([0, ""]);
      expect(own.stdout).toContain("dead-team-a");
      const tried = cli("_INBOX_team_a", "attempts", "--destination", "team-a/hook");
      expect([tried.status, tried.stderr]).toEqual([0, ""]);
      expect(tried.stdout).toContain("tried-team-a");
      for (const command of ["dead-letters", "attempts"]) {
        const other = cli("_INBOX_team_a", command, "--destination", "team-b/hook");
        expect(other.status).toBe(2);
        expect(other.stderr).toMatch(/^trackhook: the NATS user may not do this: Permissions Violation for Publish to "\$JS\.API\.CONSUMER\.CREATE\.TRACKHOOK_(DLQ|ATTEMPTS)\.[^.]+\.trackhook\.(dlq|attempts)\.team-b\.hook"/);
        expect(other.stdout).not.toContain("team-b");
      }
      // Without its inbox prefix it is told which variable to set.
      const noPrefix = cli(undefined, "dead-letters", "--destination", "team-a/hook");
      expect(noPrefix.status).toBe(2);
      expect(noPrefix.stderr).toContain("Permissions Violation for Subscription to \"_INBOX.");
      expect(noPrefix.stderr).toContain("set TRACKHOOK_NATS_INBOX_PREFIX");
    });

    it("lets the installation's admin user (TRACKHOOK_ADMIN) run every admin command: status, tail, dead-letters, attempts, replay, delete-user", async () => {
      // On the destination crm of the first test, whose consumer replay needs.
      const deliveryNc = await as("delivery");
      const djsm = await jetstreamManager(deliveryNc);
      await ensureStream(djsm, dlqStreamConfig({ maxBytes: 64 * 1024 ** 2, replicas: 1 }));
      await ensureStream(djsm, attemptsStreamConfig({ maxBytes: 64 * 1024 ** 2, replicas: 1 }));
      await jetstream(deliveryNc).publish("trackhook.dlq.default.crm", JSON.stringify({ type: "track", event: "E", userId: "u-admin", messageId: "dead-admin" }), { headers: deadLetterHeaders("retry_window_exhausted") });
      const adminEnv = { ...process.env, TRACKHOOK_NATS_USER: "trackhook-admin", TRACKHOOK_NATS_PASSWORD: PASSWORDS.admin, TRACKHOOK_NATS_INBOX_PREFIX: "_INBOX_trackhook_admin" };
      const cli = (...args: string[]) => spawnSync(process.execPath, [join(repoRoot, "cli", "main.ts"), ...args, "--nats", server.url], { encoding: "utf8", timeout: 20_000, env: adminEnv });
      const ok = (result: ReturnType<typeof cli>) => expect([result.status, result.stderr]).toEqual([0, expect.not.stringContaining("Permissions Violation")]);
      const status = cli("status", "--json");
      ok(status);
      expect(JSON.parse(status.stdout)).toMatchObject({ destinations: expect.arrayContaining([expect.objectContaining({ destination: "default/crm" })]) });
      const letters = cli("dead-letters", "--destination", "default/crm");
      ok(letters);
      expect(letters.stdout).toContain("dead-admin");
      ok(cli("attempts", "--destination", "default/crm"));
      const replayed = cli("replay", "--destination", "default/crm", "--json");
      ok(replayed);
      expect(JSON.parse(replayed.stdout)).toMatchObject({ destination: "default/crm", replayed: 1 });
      const configDir = join(store, "admin-config");
      mkdirSync(configDir, { recursive: true });
      writeFileSync(join(configDir, "config.yaml"), [
        "apiVersion: v1\nkind: Secret\nmetadata: { name: keys }\nstringData: { writeKey: admin-key }",
        "apiVersion: trackhook.io/v1alpha1\nkind: Source\nmetadata: { name: web }\nspec: { writeKeySecretRef: { name: keys, key: writeKey } }",
        `apiVersion: trackhook.io/v1alpha1\nkind: WebhookDestination\nmetadata: { name: crm }\nspec: { sources: [web], urls: ["${receiver.url("/crm")}"] }`,
      ].join("\n---\n"));
      const deleted = cli("delete-user", "--config", configDir, "--source", "default/web", "--user-id", "u-admin", "--json");
      ok(deleted);
      expect(JSON.parse(deleted.stdout)).toMatchObject({ source: "default/web", stored: 1 });
      // tail, until Ctrl-C: it prints what is stored, the delete notification just sent included.
      const tail = spawn(process.execPath, [join(repoRoot, "cli", "main.ts"), "tail", "--source", "default/web", "--since", "1h", "--nats", server.url], { env: adminEnv });
      let printed = "";
      let said = "";
      tail.stdout.on("data", (c: Buffer) => (printed += c.toString()));
      tail.stderr.on("data", (c: Buffer) => (said += c.toString()));
      const exited = new Promise<number | null>((resolve) => tail.on("exit", (code) => resolve(code)));
      try {
        await expect.poll(() => printed, { timeout: 10_000 }).toContain('"type":"delete"');
        tail.kill("SIGINT");
        expect([await exited, said]).toEqual([0, expect.not.stringContaining("Permissions Violation")]);
      } finally {
        tail.kill("SIGKILL");
      }
    });

    it("keeps delivery from storing events, and ingest from writing the config or storing a delete notification", async () => {
      const delivery = jetstream(await as("delivery"), { timeout: 2000 });
      await expect(delivery.publish("trackhook.events.default.web.track", "{}")).rejects.toThrow(/Permissions Violation/);
      const ingest = jetstream(await as("ingest"), { timeout: 2000 });
      await expect(ingest.publish(`$KV.${CONFIG_BUCKET}.source.default.evil`, "{}")).rejects.toThrow(/Permissions Violation/);
      // Nor forge a delete notification, which receivers act on as an erasure request.
      await expect(ingest.publish("trackhook.events.default.web.delete", '{"type":"delete","userId":"victim"}')).rejects.toThrow(/Permissions Violation/);
    });
  });
});

/** The shipped file with its team-admin example uncommented, as the file's comment says to do. */
function withTeamAdmin(shipped: string): string {
  const lines = shipped.split("\n");
  const start = lines.indexOf("# TRACKHOOK_TEAM_A_ADMIN = {");
  const end = lines.indexOf("# }", start);
  const user = lines.findIndex((line) => line.trim().startsWith("# { user: team-a,"));
  if (start < 0 || end < 0 || user < 0) throw new Error("docs/nats-permissions.conf: the team admin example changed; update this test");
  for (const i of [...Array.from({ length: end - start + 1 }, (_, k) => start + k), user]) lines[i] = lines[i]!.replace("# ", "");
  return lines.join("\n");
}
