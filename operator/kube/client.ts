// The API clients the operator uses, and the few facts about their errors it relies on.
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import {
  ApiException,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node";
import { GROUP, VERSION } from "../../schema/mod.ts";

export interface Kube {
  kc: KubeConfig;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  coordination: CoordinationV1Api;
}

/** `--kubeconfig <path>`, else in-cluster config in a pod, else $KUBECONFIG / ~/.kube/config. */
export function loadKubeConfig(path?: string): KubeConfig {
  const kc = new KubeConfig();
  if (path) kc.loadFromFile(path);
  else if (process.env.KUBERNETES_SERVICE_HOST && !process.env.KUBECONFIG) kc.loadFromCluster();
  else if (!process.env.KUBECONFIG && !existsSync(join(homedir(), ".kube", "config"))) {
    // client-node would fall back to http://localhost and retry it for ever.
    throw new Error("no Kubernetes config found: not in a cluster, no $KUBECONFIG and no ~/.kube/config; pass --kubeconfig <path>");
  } else kc.loadFromDefault();
  return kc;
}

export function kubeClients(kc: KubeConfig): Kube {
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    coordination: kc.makeApiClient(CoordinationV1Api),
  };
}

/** Options that make a client-node patch call send a JSON merge patch (its default is JSON Patch). */
export const MERGE_PATCH = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

export const apiStatus = (err: unknown): number | undefined => (err instanceof ApiException ? err.code : undefined);
export const isNotFound = (err: unknown) => apiStatus(err) === 404;
export const isConflict = (err: unknown) => apiStatus(err) === 409;

/** An API error as one line: the server's message, not the client's whole response dump. */
export function apiErrorMessage(err: unknown): string {
  if (err instanceof ApiException) {
    const body = typeof err.body === "string" ? safeJson(err.body) : err.body;
    const message = (body as { message?: unknown } | undefined)?.message;
    return `HTTP ${err.code}${typeof message === "string" ? `: ${message}` : ""}`;
  }
  return err instanceof Error ? err.message : String(err);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Metadata fields of every object the operator reads. */
export interface ObjectMeta {
  name: string;
  namespace: string;
  uid: string;
  resourceVersion: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  finalizers?: string[];
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
}

export interface CustomResource<Spec, Status> extends KubeObject {
  spec: Spec;
  status?: Status;
}

export const customResource = (plural: string) => ({ group: GROUP, version: VERSION, plural });
