// globalSetup of the vitest project "kube": one control plane for the whole run, CRDs applied.
// Vitest runs a project's globalSetup only when that project has test files to run, so
// `vitest run test/ingest` does not pay for it.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { applyCrds, reapOrphanedControlPlanes, startControlPlane } from "./control-plane.ts";

const PREFIX = "trackhook-kube-";

export default async function setup(project: TestProject): Promise<(() => Promise<void>) | undefined> {
  const external = process.env.TRACKHOOK_TEST_KUBECONFIG;
  if (external) {
    await applyCrdsLoudly(external);
    return undefined;
  }
  // A run killed before its teardown leaves etcd and kube-apiserver behind; stop those first.
  for (const dir of await reapOrphanedControlPlanes(tmpdir(), PREFIX)) console.warn(`kube: stopped the orphaned control plane in ${dir}`);
  const dir = mkdtempSync(join(tmpdir(), PREFIX));
  const started = performance.now();
  // On failure the state dir stays, logs included, for a look.
  const cp = await startControlPlane({ dir });
  try {
    await applyCrdsLoudly(cp.kubeconfigPath);
  } catch (err) {
    await cp.stop();
    throw err;
  }
  console.log(`kube: control plane at ${cp.server} ready with CRDs in ${((performance.now() - started) / 1000).toFixed(1)} s (state in ${dir})`);
  project.provide("trackhookKubeconfig", cp.kubeconfigPath);
  return () => cp.stop({ removeDir: true });
}

async function applyCrdsLoudly(kubeconfig: string): Promise<void> {
  try {
    await applyCrds(kubeconfig);
  } catch (err) {
    throw new Error(`kube: applying crds/ failed, so no kube test can run: ${(err as Error).message}`, { cause: err });
  }
}
