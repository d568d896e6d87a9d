// The API clients the operator uses, and the few facts about their errors it relies on.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import {
  ApiException,
  ApiextensionsV1Api,
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
  apiextensions: ApiextensionsV1Api;
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
  reuseConnections(kc);
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    coordination: kc.makeApiClient(CoordinationV1Api),
    apiextensions: kc.makeApiClient(ApiextensionsV1Api),
  };
}

interface Closable {
  close(): Promise<void>;
}
type CreateDispatcher = (cluster: unknown, agentOptions: Record<string, unknown>) => Closable | undefined;

/**
 * client-node 2.0 builds a new undici Agent for every API call, so each call opened its own TLS
 * connection: an operator with 600 resources held ~200 sockets and 500-700 MB of RSS, and spent
 * most of its CPU in handshakes (each resync reads every Secret). One Agent per TLS identity
 * instead; a new identity (a rotated client certificate or CA) gets a new Agent, and the old one
 * closes once its requests and watches are over.
 */
function reuseConnections(kc: KubeConfig): void {
  const create = Reflect.get(kc, "createDispatcher") as CreateDispatcher | undefined;
  if (typeof create !== "function") return; // a client-node without it: nothing to fix
  let current: { identity: string; dispatcher: Closable | undefined } | undefined;
  const cached: CreateDispatcher = (cluster, agentOptions) => {
    const identity = tlsIdentity(cluster, agentOptions);
    if (current?.identity === identity) return current.dispatcher;
    const previous = current?.dispatcher;
    current = { identity, dispatcher: create.call(kc, cluster, agentOptions) };
    void previous?.close().catch(() => undefined);
    return current.dispatcher;
  };
  Reflect.set(kc, "createDispatcher", cached);
}

/** A digest of everything the Agent is built from (the key material itself is not kept). */
function tlsIdentity(cluster: unknown, agentOptions: Record<string, unknown>): string {
  const c = (cluster ?? {}) as Record<string, unknown>;
  const hash = createHash("sha256");
  for (const value of [c.server, c.proxyUrl, c.skipTLSVerify, c.tlsServerName]) hash.update(`${String(value)}\0`);
  for (const key of ["ca", "cert", "key", "pfx", "passphrase", "rejectUnauthorized", "servername"]) {
    const value = agentOptions[key];
    hash.update(Buffer.isBuffer(value) ? value : `${String(value)}`).update("\0");
  }
  return hash.digest("hex");
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
  annotations?: Record<string, string>;
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
