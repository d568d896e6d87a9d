// Config changes take effect without a restart: a new Source starts working, a rotated key
// replaces the old one, and a broken edit keeps the last good config.
import { renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Registry } from "prom-client";
import { FileConfigProvider, configMetrics, sha256Hex } from "../../dataplane/config/mod.ts";
import { createLogger } from "../../dataplane/logging.ts";
import { startNats, type NatsHarness } from "../harness/nats.ts";
import { basic, post, startIngest, type IngestHarness } from "../harness/ingest.ts";
import { tempDir } from "../harness/temp.ts";

const doc = (keys: Record<string, string>) =>
  Object.entries(keys)
    .map(([name, key]) => `apiVersion: v1
kind: Secret
metadata: { name: ${name}-key }
stringData: { writeKey: ${key} }
---
apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: ${name} }
spec: { writeKeySecretRef: { name: ${name}-key, key: writeKey } }
`)
    .join("---\n");

let nats: NatsHarness;
let ingest: IngestHarness;
let provider: FileConfigProvider;
const dir = tempDir("reload");
const file = join(dir, "sources.yaml");

/** Writes like an editor does: a new file renamed over the old one. */
function save(text: string) {
  writeFileSync(`${file}.tmp`, text);
  renameSync(`${file}.tmp`, file);
}

async function statusFor(key: string): Promise<number> {
  return (await post(`${ingest.url}/v1/track`, { userId: "u", event: "e" }, { headers: { authorization: basic(key) } })).status;
}

async function eventually(check: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}

beforeAll(async () => {
  save(doc({ web: "key-one" }));
  provider = new FileConfigProvider(file, createLogger({ level: "silent" }), { debounceMs: 50 });
  nats = await startNats();
  ingest = await startIngest(nats, { config: provider });
});
afterAll(async () => {
  provider?.close();
  await ingest?.close();
  await nats?.stop();
});

describe("live config reload from files", () => {
  it("starts with the config on disk", async () => {
    expect(await statusFor("key-one")).toBe(200);
    expect(await statusFor("key-two")).toBe(401);
  });

  it("a new Source works without a restart", async () => {
    save(doc({ web: "key-one", app: "key-two" }));
    await eventually(async () => (await statusFor("key-two")) === 200);
  });

  it("a rotated key takes effect and the old key stops working", async () => {
    save(doc({ web: "key-one-rotated", app: "key-two" }));
    await eventually(async () => (await statusFor("key-one-rotated")) === 200);
    expect(await statusFor("key-one")).toBe(401);
  });

  it("a file caught empty while being written (`gen > file`) keeps the config in force (regression: every key refused, every destination's backlog dropped)", async () => {
    writeFileSync(file, ""); // truncated in place, as a shell redirection does before writing
    await new Promise((r) => setTimeout(r, 400));
    expect(provider.current().sources.map((s) => s.name).sort()).toEqual(["app", "web"]);
    expect(await statusFor("key-one-rotated")).toBe(200);
    writeFileSync(file, doc({ web: "key-one-rotated", app: "key-two" }));
    await new Promise((r) => setTimeout(r, 200));
    expect(await statusFor("key-two")).toBe(200);
  });

  it("a file caught half-written (its first documents only) does not refuse the missing Source's key, even for a moment; a real removal takes effect a second later", async () => {
    const full = doc({ web: "key-one-rotated", app: "key-two" });
    writeFileSync(file, doc({ web: "key-one-rotated" })); // the first half, in place
    const statuses: number[] = [];
    const watching = (async () => {
      for (const until = Date.now() + 700; Date.now() < until; ) {
        statuses.push(await statusFor("key-two"));
        await new Promise((r) => setTimeout(r, 30));
      }
    })();
    await new Promise((r) => setTimeout(r, 350));
    writeFileSync(file, full); // the rest
    await watching;
    expect(statuses.length).toBeGreaterThan(5);
    expect(statuses.every((status) => status === 200), JSON.stringify(statuses)).toBe(true);

    save(doc({ web: "key-one-rotated" })); // really removed
    await new Promise((r) => setTimeout(r, 400));
    expect(await statusFor("key-two")).toBe(200); // not yet: confirmed by a second read first
    await eventually(async () => (await statusFor("key-two")) === 401, 5_000);
    save(full);
    await eventually(async () => (await statusFor("key-two")) === 200);
  });

  it("a file rewritten by a writer that pauses mid-value never puts the cut key in force (found by a config churn review: 401 for a valid key, secrets and URLs cut short)", async () => {
    // The same config with the web key's Secret last, in block style: cut in its value, the text
    // still parses and every Source is still there.
    const [, webSource, appSecret, appSource] = doc({ web: "key-one-rotated", app: "key-two" }).split("---\n");
    const webSecret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: web-key\nstringData:\n  writeKey: key-one-rotated\n";
    const full = [webSource, appSource, appSecret, webSecret].join("---\n");
    const cut = full.indexOf("key-one-rotated") + "key-one-rot".length;
    const statuses: number[] = [];
    const watching = (async () => {
      for (const until = Date.now() + 1_200; Date.now() < until; ) {
        statuses.push(await statusFor("key-one-rotated"));
        await new Promise((r) => setTimeout(r, 30));
      }
    })();
    writeFileSync(file, full.slice(0, cut)); // the same bytes again, in place, cut in the middle of the key...
    await new Promise((r) => setTimeout(r, 600)); // ...and a pause (a generator's buffer, a secret fetched)
    writeFileSync(file, full);
    await watching;
    expect(statuses.length).toBeGreaterThan(10);
    expect(statuses.every((status) => status === 200), JSON.stringify(statuses)).toBe(true);
    expect(await statusFor("key-one-rot")).toBe(401);
  });

  it("a broken edit is refused and the last good config stays in force", async () => {
    save("apiVersion: trackhook.io/v1alpha1\nkind: Source\nmetadata: { name: web }\nspec: {}\n");
    await new Promise((r) => setTimeout(r, 400));
    expect(await statusFor("key-one-rotated")).toBe(200);
    expect(await statusFor("key-two")).toBe(200);
  });
});

describe("the log of a file config", () => {
  it("says when a broken edit is fixed back to the config in use, so the last line is not the error", async () => {
    const own = tempDir("reload-log");
    const path = join(own, "sources.yaml");
    const write = (text: string) => {
      writeFileSync(`${path}.tmp`, text);
      renameSync(`${path}.tmp`, path);
    };
    write(doc({ web: "key-one" }));
    const lines: Array<{ msg: string }> = [];
    const watched = new FileConfigProvider(path, createLogger({ level: "info", destination: { write: (line: string) => lines.push(JSON.parse(line) as { msg: string }) } }), { debounceMs: 20 });
    try {
      write("not: [valid");
      await eventually(async () => lines.some((l) => l.msg.startsWith("config reload failed")));
      write(doc({ web: "key-one" }));
      await eventually(async () => lines.some((l) => l.msg.startsWith("config valid again")));
      // (A save can reach the watcher as more than one event: each may log its reload.)
      expect(lines.at(-1)?.msg).toBe("config valid again; unchanged from the config in use");
      expect(new Set(lines.map((l) => l.msg))).toEqual(new Set(["config reload failed; keeping the previous config", "config valid again; unchanged from the config in use"]));
    } finally {
      watched.close();
    }
  });

  it("says what a reload changed, by name and field, never a value (found by a VM install review: only counts)", async () => {
    const own = tempDir("reload-changes");
    const path = join(own, "sources.yaml");
    writeFileSync(path, doc({ web: "key-one" }));
    const lines: Array<Record<string, unknown>> = [];
    const watched = new FileConfigProvider(path, createLogger({ level: "info", destination: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) } }), { debounceMs: 20 });
    try {
      writeFileSync(`${path}.tmp`, doc({ web: "key-two", app: "key-three" }));
      renameSync(`${path}.tmp`, path);
      await eventually(async () => lines.some((l) => l.msg === "config reloaded"));
      expect(lines.find((l) => l.msg === "config reloaded")).toMatchObject({ sources: 2, changes: ["source default/web changed (write key)", "source default/app added"] });
      expect(JSON.stringify(lines)).not.toMatch(/key-(two|three)/);
    } finally {
      watched.close();
    }
  });

  it("says once that a DeletionRequest in the files is passed over, and again for a new one (found by a parity review: it stopped dev)", async () => {
    const own = tempDir("reload-deletion");
    const request = (name: string) => `---\napiVersion: trackhook.io/v1alpha1\nkind: DeletionRequest\nmetadata: { name: ${name} }\nspec: { userIds: [u-1] }\n`;
    const path = join(own, "sources.yaml");
    writeFileSync(path, doc({ web: "key-one" }) + request("gdpr-1"));
    const lines: Array<Record<string, unknown>> = [];
    const watched = new FileConfigProvider(path, createLogger({ level: "info", destination: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) } }), { debounceMs: 20, settleMs: 100 });
    const passedOver = () => lines.filter((l) => String(l.msg).includes("passed over")).map((l) => String(l.msg).match(/DeletionRequest (\S+)\)/)?.[1]);
    try {
      expect(passedOver()).toEqual(["gdpr-1"]);
      expect(lines.find((l) => String(l.msg).includes("passed over"))).toMatchObject({ level: 40 });
      writeFileSync(path, doc({ web: "key-two" }) + request("gdpr-1") + request("gdpr-2"));
      await eventually(async () => lines.some((l) => l.msg === "config reloaded"));
      expect(passedOver()).toEqual(["gdpr-1", "gdpr-2"]);
    } finally {
      watched.close();
    }
  });

  it("delivery's files may lose their last destination while they hold Sources (found by a review: refused as 'the config now holds no Source and no WebhookDestination')", async () => {
    const own = tempDir("reload-last-destination");
    const source = "apiVersion: trackhook.io/v1alpha1\nkind: Source\nmetadata: { name: web }\nspec: { writeKeySecretRef: { name: keys, key: writeKey } }\n";
    writeFileSync(join(own, "sources.yaml"), source);
    writeFileSync(join(own, "x.yaml"), "apiVersion: trackhook.io/v1alpha1\nkind: WebhookDestination\nmetadata: { name: x }\nspec: { sources: [web], urls: [\"https://hooks.example.com/x\"] }\n");
    const watched = new FileConfigProvider(own, createLogger({ level: "silent" }), { part: "destinations", debounceMs: 20, settleMs: 100 });
    try {
      expect(watched.current().destinations.map((d) => d.name)).toEqual(["x"]);
      rmSync(join(own, "x.yaml"));
      await eventually(async () => watched.current().destinations.length === 0);
      // Emptied for real, Sources and all, it is refused as before.
      writeFileSync(join(own, "x.yaml"), "apiVersion: trackhook.io/v1alpha1\nkind: WebhookDestination\nmetadata: { name: x }\nspec: { sources: [web], urls: [\"https://hooks.example.com/x\"] }\n");
      await eventually(async () => watched.current().destinations.length === 1);
      writeFileSync(join(own, "sources.yaml"), "");
      writeFileSync(join(own, "x.yaml"), "");
      await new Promise((r) => setTimeout(r, 600));
      expect(watched.current().destinations.map((d) => d.name)).toEqual(["x"]);
    } finally {
      watched.close();
    }
  });

  it("counts a refused reload in a metric, and when the config in force was last read valid (found by a review: only the log said so)", async () => {
    const own = tempDir("reload-metric");
    const path = join(own, "sources.yaml");
    const write = (text: string) => {
      writeFileSync(`${path}.tmp`, text);
      renameSync(`${path}.tmp`, path);
    };
    write(doc({ web: "key-one" }));
    const watched = new FileConfigProvider(path, createLogger({ level: "silent" }), { debounceMs: 20 });
    const registry = new Registry();
    configMetrics(registry, watched);
    const sample = async (name: string) => (await registry.getSingleMetric(name)!.get()).values[0]?.value;
    try {
      expect(await sample("trackhook_config_rejected_total")).toBe(0);
      const started = await sample("trackhook_config_loaded_timestamp_seconds");
      write("not: [valid");
      await eventually(async () => (await sample("trackhook_config_rejected_total")) === 1);
      expect(await sample("trackhook_config_loaded_timestamp_seconds")).toBe(started);
      await new Promise((r) => setTimeout(r, 20));
      write(doc({ web: "key-two" }));
      await eventually(async () => (await sample("trackhook_config_loaded_timestamp_seconds"))! > started!);
      expect(await sample("trackhook_config_rejected_total")).toBe(1);
      // A file caught empty while being written (`gen > config.yaml`) is not counted: it is whole again a moment later (found by a review).
      write("");
      await new Promise((r) => setTimeout(r, 300));
      write(doc({ web: "key-two" }));
      await new Promise((r) => setTimeout(r, 1_500));
      expect(await sample("trackhook_config_rejected_total")).toBe(1);
    } finally {
      watched.close();
    }
  });
});

describe("config files behind symlinks (found by a review: an edit of a linked file never took effect)", () => {
  it("a Kubernetes-ConfigMap-style mount (files linked through ..data, swapped on update) and a linked file edited in place are both reloaded", async () => {
    const { mkdirSync, symlinkSync } = await import("node:fs");
    const mount = tempDir("cm");
    const outside = tempDir("linked");
    // As the kubelet lays a ConfigMap out: ..<timestamp>/file, ..data -> ..<timestamp>, file -> ..data/file.
    mkdirSync(join(mount, "..2026_a"));
    writeFileSync(join(mount, "..2026_a", "cm.yaml"), doc({ cm: "cm-key-one" }));
    symlinkSync("..2026_a", join(mount, "..data"));
    symlinkSync("..data/cm.yaml", join(mount, "cm.yaml"));
    writeFileSync(join(outside, "linked.yaml"), doc({ linked: "linked-key-one" }));
    symlinkSync(join(outside, "linked.yaml"), join(mount, "linked.yaml"));

    const files = new FileConfigProvider(mount, createLogger({ level: "silent" }), { debounceMs: 50, settleMs: 100, pollMs: 200 });
    const single = new FileConfigProvider(join(mount, "cm.yaml"), createLogger({ level: "silent" }), { debounceMs: 50, settleMs: 100, pollMs: 200 });
    const keyOf = (p: FileConfigProvider, name: string) => p.current().sources.find((s) => s.name === name)?.writeKeySha256;
    try {
      expect([keyOf(files, "cm"), keyOf(files, "linked"), keyOf(single, "cm")]).toEqual([sha256Hex("cm-key-one"), sha256Hex("linked-key-one"), sha256Hex("cm-key-one")]);
      // The kubelet's update: a new timestamped dir, ..data swapped to it by a rename.
      mkdirSync(join(mount, "..2026_b"));
      writeFileSync(join(mount, "..2026_b", "cm.yaml"), doc({ cm: "cm-key-two" }));
      symlinkSync("..2026_b", join(mount, "..data_tmp"));
      renameSync(join(mount, "..data_tmp"), join(mount, "..data"));
      // And a linked file edited in place.
      writeFileSync(join(outside, "linked.yaml"), doc({ linked: "linked-key-two" }));
      await eventually(async () => keyOf(files, "cm") === sha256Hex("cm-key-two") && keyOf(files, "linked") === sha256Hex("linked-key-two"));
      await eventually(async () => keyOf(single, "cm") === sha256Hex("cm-key-two"));
    } finally {
      files.close();
      single.close();
    }
  });
});

describe("a config directory replaced (found by a config churn review: its watch was dead, every change waited for the poll)", () => {
  it("is watched again: a change after the replacement takes effect as fast as before it", async () => {
    const { mkdirSync, rmSync } = await import("node:fs");
    const parent = tempDir("replaced");
    const configDir = join(parent, "config");
    mkdirSync(configDir);
    writeFileSync(join(configDir, "sources.yaml"), doc({ web: "key-a" }));
    // The poll every 2 s: a change the watch sees is in force in ~0.15 s, one only the poll sees in up to ~2.2 s.
    const created = Date.now();
    const watched = new FileConfigProvider(configDir, createLogger({ level: "silent" }), { debounceMs: 50, settleMs: 100, pollMs: 2_000 });
    const key = () => watched.current().sources.find((s) => s.name === "web")?.writeKeySha256;
    try {
      rmSync(configDir, { recursive: true });
      mkdirSync(configDir);
      writeFileSync(join(configDir, "sources.yaml"), doc({ web: "key-b" }));
      await eventually(async () => key() === sha256Hex("key-b"), 5_000);
      // Past the first poll, which finds the directory replaced and watches the new one.
      await new Promise((r) => setTimeout(r, created + 2_300 - Date.now()));
      writeFileSync(join(configDir, "sources.yaml"), doc({ web: "key-c" }));
      const written = Date.now();
      await eventually(async () => key() === sha256Hex("key-c"), 5_000);
      expect(Date.now() - written).toBeLessThan(1_000);
    } finally {
      watched.close();
      rmSync(parent, { recursive: true, force: true });
    }
  });
});

describe("the settle read of a --config change", () => {
  it("applies only files as the read that started the wait found them: a write just before the settle read waits another round (diff review of the config churn fix)", async () => {
    const own = tempDir("settle");
    const path = join(own, "sources.yaml");
    writeFileSync(path, doc({ web: "key-one" }));
    // Watch, poll and settle timers all far off: this test drives the reads itself, so what it
    // checks does not depend on when the watcher fires.
    const watched = new FileConfigProvider(path, createLogger({ level: "silent" }), { debounceMs: 600_000, settleMs: 600_000, pollMs: 600_000 });
    const applied: string[] = [];
    watched.subscribe((config) => applied.push(config.sources[0]!.writeKeySha256));
    try {
      writeFileSync(path, doc({ web: "key-one-ro" })); // a writer cut mid-value...
      watched.reload(); // ...seen: the wait starts
      writeFileSync(path, doc({ web: "key-one-rot" })); // more of it written just before...
      watched.reload(true); // ...the settle read: not as the first read found it, so another round
      expect(applied).toEqual([]);
      writeFileSync(path, doc({ web: "key-one-rotated" }));
      watched.reload(true); // changed again since the last read: another round
      expect(applied).toEqual([]);
      watched.reload(true); // unchanged since: in force
      expect(applied).toEqual([sha256Hex("key-one-rotated")]);
    } finally {
      watched.close();
    }
  });
});
