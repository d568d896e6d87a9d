// Lists and watches that ask the API server for metadata only (PartialObjectMetadata), as
// client-go's metadata informers do. The operator watches Secrets only to hear that one changed:
// their values must never be transferred, held or parsed, and a cluster's Secrets (Helm release
// records, service account tokens) can be large and many.
import type { KubeConfig } from "@kubernetes/client-node";
import { ApiException, HttpMethod, RequestContext } from "@kubernetes/client-node";
import { fetch } from "undici";
import type { KubeObject } from "./client.ts";

const AS_METADATA = "as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const AS_METADATA_LIST = "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/** A KubeConfig whose requests (client-node's Watch among them) ask for PartialObjectMetadata. */
export function metadataOnly(kc: KubeConfig): KubeConfig {
  const config = Object.create(kc) as KubeConfig;
  config.applySecurityAuthentication = async (context: RequestContext) => {
    await kc.applySecurityAuthentication(context);
    context.setHeaderParam("Accept", `application/json;${AS_METADATA}`);
  };
  return config;
}

/** The collection at `path` (e.g. /api/v1/secrets) as PartialObjectMetadataList. */
export async function listMetadata(kc: KubeConfig, path: string): Promise<{ items: KubeObject[]; metadata?: { resourceVersion?: string } }> {
  const body = await getAs<{ items?: KubeObject[]; metadata?: { resourceVersion?: string } }>(kc, path, "PartialObjectMetadataList", AS_METADATA_LIST);
  return { items: body.items ?? [], metadata: body.metadata };
}

/** One object (e.g. /api/v1/namespaces/x/secrets/y) as PartialObjectMetadata: its labels, never its data. */
export async function readMetadata(kc: KubeConfig, path: string): Promise<KubeObject> {
  return getAs<KubeObject>(kc, path, "PartialObjectMetadata", AS_METADATA);
}

async function getAs<T>(kc: KubeConfig, path: string, kind: string, as: string): Promise<T> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error("no current cluster in the kubeconfig");
  const context = new RequestContext(`${cluster.server}${path}`, HttpMethod.GET);
  await kc.applySecurityAuthentication(context);
  context.setHeaderParam("Accept", `application/json;${as}`);
  const response = await fetch(context.getUrl(), { headers: context.getHeaders(), dispatcher: context.getDispatcher() as never });
  const text = await response.text();
  // As client-node's own calls fail, so that apiStatus(), isNotFound() and apiErrorMessage() read it
  // (a proxy's error page need not be JSON).
  if (response.status !== 200) throw new ApiException(response.status, `GET ${path}`, text, Object.fromEntries(response.headers));
  const body = JSON.parse(text) as T & { kind?: string };
  // A server that cannot convert would answer the full objects: never keep those.
  if (body.kind !== kind) throw new Error(`GET ${path}: expected ${kind}, got ${body.kind}`);
  return body;
}
