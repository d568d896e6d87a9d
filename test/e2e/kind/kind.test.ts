// The kind e2e suite (run.sh) needs Docker, which CI lacks; this keeps its parts from rotting:
// the script parses (and passes shellcheck where installed) and skips cleanly without Docker, its
// chart values render, and its client (send-and-verify.ts, the @segment/analytics-node side) and
// in-cluster receiver (receiver.yaml's server) pass against `trackhook dev` with the same Source
// and WebhookDestination documents (resources.yaml). test/kube/chart.test.ts dry-runs those
// documents on the API server.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { render, repoRoot } from "../../chart/helm.ts";
import { freePort } from "../../harness/ports.ts";

const execFileAsync = promisify(execFile);
const here = join(repoRoot, "test", "e2e", "kind");
const script = join(here, "run.sh");

async function run(command: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execFileAsync(command, args, { env, cwd: repoRoot });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : 1, stdout: e.stdout ?? "", stderr: e.stderr ?? String(err) };
  }
}


async function waitFor(url: string, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    try {
      if ((await fetch(url)).status === 200) return;
    } catch {
      // not up yet
    }
    await sleep(100);
  }
  throw new Error(`${url} did not answer 200 within ${timeoutMs} ms`);
}

const children: ChildProcess[] = [];
const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("exit", () => resolve());
          child.kill("SIGTERM");
          setTimeout(() => child.kill("SIGKILL"), 10_000).unref();
        }),
    ),
  );
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe("test/e2e/kind without kind", () => {
  it("run.sh parses, passes shellcheck where it is installed, and skips with exit 0 where Docker is missing", async () => {
    expect((await run("bash", ["-n", script])).code).toBe(0);
    const shellcheck = await run("bash", ["-c", "command -v shellcheck"]);
    if (shellcheck.code === 0) {
      const lint = await run("shellcheck", [script]);
      expect(lint.code, lint.stdout).toBe(0);
    }
    // No docker on PATH at all: a clear skip, exit 0, and a summary line CI can read.
    const noDocker = await run("/bin/bash", [script], { ...process.env, PATH: "/nonexistent" });
    expect(noDocker.code, noDocker.stderr).toBe(0);
    expect(noDocker.stdout).toContain("e2e kind: SKIPPED: docker is not installed");
    expect(noDocker.stdout.trim().split("\n").at(-1)).toBe("0 passed, 0 failed, 1 skipped");
    // And where docker is installed but its engine is unreachable (as on this project's CI).
    if ((await run("bash", ["-c", "command -v docker && ! docker info"])).code === 0) {
      const noEngine = await run("bash", [script]);
      expect(noEngine.code, noEngine.stderr).toBe(0);
      expect(noEngine.stdout).toContain("`docker info` failed");
    }
  });

  it("values-e2e.yaml renders with the chart: the loaded image is never pulled, delivery may reach the in-cluster receiver", async () => {
    const docs = await render({ release: "trackhook", valuesFiles: [join(here, "values-e2e.yaml")], set: { "image.tag": "e2e-abc1234" } });
    const deployments = docs.filter((d) => d.kind === "Deployment");
    expect(deployments.map((d) => d.metadata.name).sort()).toEqual(["trackhook-delivery", "trackhook-ingest", "trackhook-operator"]);
    for (const d of deployments) {
      expect(d.spec.template.spec.containers[0].image).toBe("trackhook:e2e-abc1234");
      expect(d.spec.template.spec.containers[0].imagePullPolicy).toBe("Never");
    }
    const delivery = deployments.find((d) => d.metadata.name === "trackhook-delivery")!;
    expect(delivery.spec.template.spec.containers[0].args).toContain("--allow-private-networks");
    // run.sh port-forwards this Service.
    expect(docs.some((d) => d.kind === "Service" && d.metadata.name === "trackhook-ingest" && d.spec.ports[0].port === 80)).toBe(true);
  });

  it("send-and-verify.ts and the receiver deliver every SDK event signed, against trackhook dev with resources.yaml", async () => {
    const dir = mkdtempSync(join(tmpdir(), "trackhook-e2e-local-"));
    dirs.push(dir);
    const [ingestPort, receiverPort] = [await freePort(), await freePort()];
    // The receiver exactly as receiver.yaml runs it in the cluster.
    const receiverConfig = parseAllDocuments(readFileSync(join(here, "receiver.yaml"), "utf8"))[0]!.toJSON() as { data: Record<string, string> };
    writeFileSync(join(dir, "server.cjs"), receiverConfig.data["server.cjs"]!);
    // resources.yaml with the receiver's in-cluster URL pointed at the local one, and the Secrets run.sh creates.
    const resources = readFileSync(join(here, "resources.yaml"), "utf8").replace(
      /http:\/\/receiver\.trackhook-e2e\.svc\.cluster\.local:8080\/hook/,
      `http://127.0.0.1:${receiverPort}/hook`,
    );
    expect(resources).toContain(`127.0.0.1:${receiverPort}`);
    const secrets = [
      { apiVersion: "v1", kind: "Secret", metadata: { name: "website-write-key" }, stringData: { writeKey: "e2e-local-write-key" } },
      { apiVersion: "v1", kind: "Secret", metadata: { name: "receiver-webhook" }, stringData: { sharedSecret: "e2e-local-secret" } },
    ];
    writeFileSync(join(dir, "config.yaml"), `${secrets.map((s) => JSON.stringify(s)).join("\n---\n")}\n---\n${resources}`);

    const output: string[] = [];
    const start = (args: string[], env: NodeJS.ProcessEnv = process.env) => {
      const child = spawn(process.execPath, args, { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"] });
      child.stdout!.on("data", (b: Buffer) => output.push(b.toString()));
      child.stderr!.on("data", (b: Buffer) => output.push(b.toString()));
      children.push(child);
      return child;
    };
    start([join(dir, "server.cjs")], { ...process.env, PORT: String(receiverPort) });
    start([join(repoRoot, "cli", "main.ts"), "dev", "--config", join(dir, "config.yaml"), "--port", String(ingestPort), "--data-dir", join(dir, "nats"), "--log-level", "warn"]);
    await Promise.all([waitFor(`http://127.0.0.1:${receiverPort}/healthz`, 10_000), waitFor(`http://127.0.0.1:${ingestPort}/readyz`, 15_000)]).catch((err: Error) => {
      throw new Error(`${err.message}\n${output.join("")}`);
    });

    // send-and-verify.ts against this dev process, checking signatures with `secret`.
    const sendAndVerify = (secret: string, events: number) =>
      run(process.execPath, [join(here, "send-and-verify.ts")], {
        ...process.env,
        INGEST_URL: `http://127.0.0.1:${ingestPort}`,
        RECEIVER_URL: `http://127.0.0.1:${receiverPort}`,
        WRITE_KEY: "e2e-local-write-key",
        SHARED_SECRET: secret,
        EVENTS: String(events),
        DELIVERY_TIMEOUT_MS: "20000",
      });
    const result = await sendAndVerify("e2e-local-secret", 12);
    expect(result.code, `${result.stdout}${result.stderr}\n${output.join("")}`).toBe(0);
    expect(result.stdout).toContain("the receiver got all 12 messages, each with a valid X-Signature");

    // And it notices a wrong signature: the same deliveries checked with another secret fail.
    const wrong = await sendAndVerify("not-the-secret", 2);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain("bad X-Signature");
  });
});
