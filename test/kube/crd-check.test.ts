// The operator refuses to start on CRDs older than itself (regression from an upgrade review: with
// crds/ not applied after `helm upgrade`, the API server dropped status.inEffectSince at every
// write, so a destination enabled again replayed the stream since its creation, and a
// DeletionRequest's final purge never ran). Checked against the real API server's CRDs.
import { createServer, type AddressInfo, type Socket } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../dataplane/logging.ts";
import { CrdsOutdatedError, checkInstalledCrds, kubeClients } from "../../operator/mod.ts";
import { missingFields } from "../../operator/kube/crd-check.ts";
import { KINDS, buildCrd } from "../../schema/mod.ts";
import { useControlPlane } from "../harness/control-plane.ts";

const cluster = useControlPlane();
const log = createLogger({ level: "silent" });

type Schema = { properties: Record<string, Schema>; "x-kubernetes-preserve-unknown-fields"?: boolean };
const crdOf = (kind: string) => buildCrd(KINDS.find((k) => k.kind === kind)!) as { metadata: { name: string }; spec: { versions: Array<{ schema: { openAPIV3Schema: Schema } }> } };
const schemaOf = (crd: ReturnType<typeof crdOf>) => crd.spec.versions[0]!.schema.openAPIV3Schema;

describe("installed CRDs", () => {
  it("this version's CRDs, as applied, pass", async () => {
    await expect(checkInstalledCrds(kubeClients(cluster.kubeConfig()).apiextensions, log)).resolves.toBe(true);
  });

  it("an operator that writes fields the installed CRDs lack refuses, naming each field and what to do", async () => {
    const destination = crdOf("WebhookDestination");
    schemaOf(destination).properties.status!.properties.deliveredSince = { properties: {} };
    const source = crdOf("Source");
    schemaOf(source).properties.spec!.properties.allowedOrigins = { properties: {} };
    const gadget = { ...crdOf("Source"), metadata: { name: "gadgets.trackhook.io" } };
    const refused = await checkInstalledCrds(kubeClients(cluster.kubeConfig()).apiextensions, log, [destination, source, gadget]).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(CrdsOutdatedError);
    expect((refused as CrdsOutdatedError).missing).toEqual([
      "webhookdestinations.trackhook.io status.deliveredSince",
      "sources.trackhook.io spec.allowedOrigins",
      "gadgets.trackhook.io (not installed)",
    ]);
    expect((refused as Error).message).toContain("kubectl apply --server-side -f crds/");
  });

  it("finds the field an older CRD lacked (status.inEffectSince), and nothing under a field that keeps unknown fields", () => {
    const ours = schemaOf(crdOf("WebhookDestination"));
    const older = structuredClone(ours);
    delete older.properties.status!.properties.inEffectSince;
    expect(missingFields(older, ours)).toEqual(["status.inEffectSince"]);
    const open = structuredClone(older);
    open.properties.status = { properties: {}, "x-kubernetes-preserve-unknown-fields": true };
    expect(missingFields(open, ours)).toEqual([]);
    // As client-node's typed model (readCustomResourceDefinition) names the key (found by review:
    // a CRD loosened this way was refused).
    const typed = structuredClone(older) as unknown as { properties: { status: Record<string, unknown> } };
    typed.properties.status = { properties: {}, x_kubernetes_preserve_unknown_fields: true };
    expect(missingFields(typed, ours)).toEqual([]);
  });

  it("an API server that refuses or does not answer is not a reason to stay down: the check warns and lets the operator start", async () => {
    const sockets: Socket[] = [];
    const silent = createServer((socket) => void sockets.push(socket)); // accepts connections, never answers (not even TLS)
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const at = (server: string) => {
        const kc = new KubeConfig();
        kc.loadFromOptions({
          clusters: [{ name: "c", server, skipTLSVerify: true }],
          users: [{ name: "u", token: "t" }],
          contexts: [{ name: "x", cluster: "c", user: "u" }],
          currentContext: "x",
        });
        return kubeClients(kc).apiextensions;
      };
      const lines: string[] = [];
      const warnLog = createLogger({ level: "warn", destination: { write: (l) => lines.push(l) } });
      // Not looked at: false, so the operator looks again once it holds the lease.
      await expect(checkInstalledCrds(at(`https://127.0.0.1:${(silent.address() as AddressInfo).port}`), warnLog, undefined, 300)).resolves.toBe(false);
      await expect(checkInstalledCrds(at("https://127.0.0.1:1"), warnLog)).resolves.toBe(false);
      expect(lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual([
        "could not check that the installed CRDs are this version's: the API server did not answer in time",
        "could not check that the installed CRDs are this version's",
      ]);
    } finally {
      for (const socket of sockets) socket.destroy();
      silent.close();
    }
  });
});
