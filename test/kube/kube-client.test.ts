// The operator's API clients reuse their connections to the API server (regression: client-node
// 2.0 opened a new TLS connection for every call; an operator with 600 resources held ~200
// sockets and 500-700 MB of RSS, most of its CPU going to handshakes).
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { Socket } from "node:net";
import { Watch } from "@kubernetes/client-node";
import { afterEach, describe, expect, it } from "vitest";
import { kubeClients } from "../../operator/mod.ts";
import { useControlPlane } from "../harness/control-plane.ts";

const cluster = useControlPlane();

/** Counts the client sockets this process opens to the API server's port while it is on. */
function countConnections(port: number) {
  let opened = 0;
  const onSocket = (message: unknown) => {
    const socket = (message as { socket: Socket }).socket;
    // The remote port is known once connected; net.connect's options are not published.
    socket.once("connect", () => {
      if (socket.remotePort === port) opened++;
    });
  };
  subscribe("net.client.socket", onSocket);
  return { opened: () => opened, stop: () => unsubscribe("net.client.socket", onSocket) };
}

describe("API client connections", () => {
  let stop: (() => void) | undefined;
  afterEach(() => stop?.());

  it("40 calls in a row and a watch share a handful of connections, not one each", async () => {
    const ns = await cluster.randomNamespace("conns");
    await cluster.kubectlOk(["create", "secret", "generic", "s", "-n", ns, "--from-literal=writeKey=k"]);
    const kube = kubeClients(cluster.kubeConfig());
    const port = Number(new URL(kube.kc.getCurrentCluster()!.server).port);
    const counter = countConnections(port);
    stop = counter.stop;

    for (let i = 0; i < 40; i++) await kube.core.readNamespacedSecret({ name: "s", namespace: ns });
    // In parallel too: the pool grows to the concurrency, then is reused.
    await Promise.all(Array.from({ length: 10 }, () => kube.core.readNamespace({ name: ns })));
    const events: string[] = [];
    const abort = await new Watch(kube.kc).watch(`/api/v1/namespaces/${ns}/secrets`, {}, (phase) => events.push(phase), () => {});
    try {
      await expect.poll(() => events.length, { timeout: 10_000 }).toBeGreaterThan(0);
      for (let i = 0; i < 10; i++) await kube.core.readNamespacedSecret({ name: "s", namespace: ns });
    } finally {
      abort.abort();
    }
    // 61 calls: at most the 10 parallel ones, the watch's and a spare.
    expect(counter.opened()).toBeGreaterThan(0);
    expect(counter.opened()).toBeLessThanOrEqual(12);
  });
});
