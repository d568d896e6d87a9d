// Kubernetes Events on the objects the operator reconciles, on transitions only (a Ready that
// flips, a request that finishes), so `kubectl describe` tells the story without noise.
import type { CoreV1Event } from "@kubernetes/client-node";
import type { Logger } from "../dataplane/logging.ts";
import { API_VERSION } from "../schema/mod.ts";
import { apiErrorMessage, type Kube, type KubeObject } from "./kube/client.ts";

export const REPORTING_COMPONENT = "trackhook-operator";

export class EventRecorder {
  readonly #kube: Kube;
  readonly #instance: string;
  readonly #log: Logger;

  constructor(kube: Kube, instance: string, log: Logger) {
    this.#kube = kube;
    this.#instance = instance;
    this.#log = log;
  }

  /** Never throws: an event that cannot be written is logged, the reconcile goes on. */
  async record(object: KubeObject & { kind: string }, type: "Normal" | "Warning", reason: string, message: string): Promise<void> {
    const now = new Date();
    const { name, namespace, uid, resourceVersion } = object.metadata;
    const body: CoreV1Event = {
      metadata: { generateName: `${name}.`, namespace },
      involvedObject: { apiVersion: API_VERSION, kind: object.kind, name, namespace, uid, resourceVersion },
      type,
      reason,
      message: message.slice(0, 1024),
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
      source: { component: REPORTING_COMPONENT },
      reportingComponent: `trackhook.io/operator`,
      reportingInstance: this.#instance,
    };
    try {
      await this.#kube.core.createNamespacedEvent({ namespace, body });
    } catch (err) {
      this.#log.warn({ err: apiErrorMessage(err), object: `${namespace}/${name}`, reason }, "could not record an event");
    }
  }
}
