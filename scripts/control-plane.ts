// A local control plane (etcd + kube-apiserver as processes) for trying the operator and the CRDs:
//   node scripts/control-plane.ts up     start it in the background in .tools/control-plane/
//   node scripts/control-plane.ts down   stop it and remove its state
import { join } from "node:path";
import { controlPlaneAt, repoRoot, startControlPlane, stopControlPlaneAt } from "../test/harness/control-plane.ts";

const dir = join(repoRoot, ".tools", "control-plane");
const stopHint = "Stop it with: npm run control-plane:down";

async function up(): Promise<void> {
  const running = controlPlaneAt(dir);
  if (running) {
    console.error(`control plane already running at ${running.server}. ${stopHint}`);
    console.log(`export KUBECONFIG=${running.kubeconfigPath}`);
    return;
  }
  // Leftovers of one that died (or half-started): start from a clean slate.
  await stopControlPlaneAt(dir);
  const started = performance.now();
  const cp = await startControlPlane({ dir, detached: true, log: (line) => console.error(line) });
  console.error(`control plane ready at ${cp.server} in ${((performance.now() - started) / 1000).toFixed(1)} s; logs in ${dir}. CRDs: kubectl apply --server-side -f crds/. ${stopHint}`);
  console.log(`export KUBECONFIG=${cp.kubeconfigPath}`);
}

async function down(): Promise<void> {
  const stopped = await stopControlPlaneAt(dir);
  console.error(stopped ? "control plane stopped" : "no control plane was running");
}

const command = process.argv[2];
if (command === "up") await up();
else if (command === "down") await down();
else {
  console.error("usage: node scripts/control-plane.ts up|down");
  process.exitCode = 2;
}
