// The operator refuses to start on CRDs older than itself (regression from an upgrade review: with
// crds/ not applied after `helm upgrade`, the API server dropped status.inEffectSince at every
// write, so a destination enabled again replayed the stream since its creation, and a
// DeletionRequest's final purge never ran). Checked against the real API server's CRDs.
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
    await expect(checkInstalledCrds(kubeClients(cluster.kubeConfig()).apiextensions, log)).resolves.toBeUndefined();
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
  });
});
