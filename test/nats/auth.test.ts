// NATS credentials and TLS come from the environment (a Secret in a cluster), never from a URL
// or a flag; a server that requires them is reachable with them and refuses without them.
import { spawnSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalNatsServer, NatsAuthError, assertNoCredentialsInUrl, natsAuthOptions } from "../../dataplane/nats/mod.ts";
import { tempDir } from "../harness/temp.ts";
import { selfSignedCert } from "../harness/tls.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
let server: LocalNatsServer;
let store: string;

beforeAll(async () => {
  store = tempDir("nats-auth");
  server = await LocalNatsServer.start({ storeDir: store, args: ["--user", "trackhook", "--pass", "pa55-word"] });
});
afterAll(async () => {
  await server.stop();
  rmSync(store, { recursive: true, force: true });
});

describe("NATS credentials from the environment", () => {
  it("connects with TRACKHOOK_NATS_USER/PASSWORD and is refused without them", async () => {
    const nc = await connect({ ...natsAuthOptions({ TRACKHOOK_NATS_USER: "trackhook", TRACKHOOK_NATS_PASSWORD: "pa55-word" }), servers: server.url });
    await nc.flush();
    await nc.close();
    await expect(connect({ ...natsAuthOptions({}), servers: server.url })).rejects.toThrow(/Authorization Violation/);
  });

  it("is used by the admin commands, and a URL with credentials is refused before connecting", () => {
    const run = (env: Record<string, string>, url = server.url) =>
      spawnSync(process.execPath, [join(root, "cli/main.ts"), "replay", "--destination", "default/none", "--nats", url], {
        cwd: root, encoding: "utf8", timeout: 20_000, env: { ...process.env, ...env },
      });
    const refused = run({});
    expect(refused.status).toBe(2); // refused credentials: a usage-class error, as run.ts maps credential problems
    expect(refused.stderr).toContain("Authorization Violation");
    const allowed = run({ TRACKHOOK_NATS_USER: "trackhook", TRACKHOOK_NATS_PASSWORD: "pa55-word" });
    expect(allowed.stderr).not.toContain("Authorization Violation");
    const inUrl = run({}, server.url.replace("nats://", "nats://trackhook:pa55-word@"));
    expect(inUrl.stderr).toContain("NATS URLs must not carry credentials");
    expect(inUrl.stderr).not.toContain("pa55-word");
  });

  it("a tls:// URL requires TLS: against a server that offers none, no connection and so no password sent (found by a CLI review: sent in the clear)", () => {
    const run = spawnSync(process.execPath, [join(root, "cli/main.ts"), "replay", "--destination", "default/none", "--nats", server.url.replace("nats://", "tls://")], {
      cwd: root, encoding: "utf8", timeout: 20_000, env: { ...process.env, TRACKHOOK_NATS_USER: "trackhook", TRACKHOOK_NATS_PASSWORD: "pa55-word" },
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/cannot connect to NATS at tls:\/\/.*TLS/i);
    expect(natsAuthOptions({}, `nats://a:4222, tls://b:4222`)).toEqual({ tls: {} });
    expect(natsAuthOptions({}, "nats://a:4222")).toEqual({});
  });

  it("refuses contradictory or unreadable settings with the variable's name", () => {
    expect(() => natsAuthOptions({ TRACKHOOK_NATS_USER: "u" })).toThrow("TRACKHOOK_NATS_USER and TRACKHOOK_NATS_PASSWORD go together");
    expect(() => natsAuthOptions({ TRACKHOOK_NATS_TOKEN: "t", TRACKHOOK_NATS_USER: "u", TRACKHOOK_NATS_PASSWORD: "p" })).toThrow(/set only one of/);
    expect(() => natsAuthOptions({ TRACKHOOK_NATS_CREDS: "/no/such.creds" })).toThrow("TRACKHOOK_NATS_CREDS: cannot read /no/such.creds: ENOENT");
    expect(() => natsAuthOptions({ TRACKHOOK_NATS_CERT: "/x.pem" })).toThrow(NatsAuthError);
    expect(natsAuthOptions({ TRACKHOOK_NATS_TOKEN: "tok" })).toEqual({ token: "tok" });
    expect(() => assertNoCredentialsInUrl("nats://a:4222, nats://u:p@b:4222")).toThrow(NatsAuthError);
    expect(() => assertNoCredentialsInUrl("nats://a:4222,tls://b:4222")).not.toThrow();
  });
});

describe("TLS to a server given by its IP address (found by a VM install review: nats.js has Node check the name localhost)", () => {
  /** A nats-server with TLS, its certificate valid for `subjectAltName` only, and that certificate as the CA file. */
  async function tlsServer(subjectAltName: string) {
    const dir = tempDir("nats-tls-ip");
    const { key, cert } = selfSignedCert(subjectAltName);
    writeFileSync(join(dir, "cert.pem"), cert);
    writeFileSync(join(dir, "key.pem"), key);
    const tls = await LocalNatsServer.start({ storeDir: dir, args: ["--tls", "--tlscert", join(dir, "cert.pem"), "--tlskey", join(dir, "key.pem")] });
    return { tls, ca: join(dir, "cert.pem"), dir };
  }
  const tryConnect = (servers: string, ca: string) => connect({ ...natsAuthOptions({ TRACKHOOK_NATS_CA: ca }, servers), servers: servers.split(","), timeout: 3_000 });

  it("connects when the certificate names the address, and refuses one that names only localhost", async () => {
    const forAddress = await tlsServer("IP:127.0.0.1");
    const forLocalhost = await tlsServer("DNS:localhost");
    try {
      await (await tryConnect(`tls://127.0.0.1:${forAddress.tls.port}`, forAddress.ca)).close();
      await expect(tryConnect(`tls://127.0.0.1:${forLocalhost.tls.port}`, forLocalhost.ca)).rejects.toThrow(/127\.0\.0\.1 is not in the cert's list/);
      // Named localhost, it is valid for localhost.
      await (await tryConnect(`tls://localhost:${forLocalhost.tls.port}`, forLocalhost.ca)).close();
    } finally {
      for (const { tls, dir } of [forAddress, forLocalhost]) {
        await tls.stop();
        rmSync(dir, { recursive: true, force: true });
      }
    }
  });
});
