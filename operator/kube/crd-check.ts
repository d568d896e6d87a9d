// The installed CRDs must know every field this operator writes or reads (status and spec alike:
// a CRD without a new spec knob would drop it from what users apply, unseen). Helm installs crds/ once and
// never upgrades them, and the API server drops the fields its schema does not know, without an
// error: after an upgrade that skipped `kubectl apply -f crds/`, a review found a destination's
// status.inEffectSince dropped at every write (enabling it again replayed the stream since its
// creation) and a DeletionRequest's status.finalPurgeAt (its final purge never ran).
import type { ApiextensionsV1Api } from "@kubernetes/client-node";
import type { Logger } from "../../dataplane/logging.ts";
import { GROUP, KINDS, VERSION, buildCrd } from "../../schema/mod.ts";
import { apiErrorMessage, apiStatus } from "./client.ts";

export class CrdsOutdatedError extends Error {
  readonly code = "TRACKHOOK_CRDS_OUTDATED";
  readonly missing: string[];
  constructor(missing: string[]) {
    super(
      `the installed CRDs are older than this operator; missing: ${missing.join(", ")}. ` +
        "Apply this version's CRDs first (kubectl apply --server-side -f crds/, or the chart's crds/ directory): helm upgrade does not update CRDs",
    );
    this.name = "CrdsOutdatedError";
    this.missing = missing;
  }
}

interface SchemaNode {
  properties?: Record<string, SchemaNode>;
  items?: SchemaNode;
  additionalProperties?: SchemaNode | boolean;
  "x-kubernetes-preserve-unknown-fields"?: boolean;
  /** The same, as client-node's typed model names it (readCustomResourceDefinition). */
  x_kubernetes_preserve_unknown_fields?: boolean;
}

/** Field paths of a structural schema ("status.conditions[].reason"); `open` gets those that keep anything below them. */
function fieldPaths(node: SchemaNode | undefined, prefix: string, out: Set<string>, open: Set<string>): void {
  if (!node) return;
  if (node["x-kubernetes-preserve-unknown-fields"] || node.x_kubernetes_preserve_unknown_fields) open.add(prefix);
  for (const [name, child] of Object.entries(node.properties ?? {})) {
    const path = prefix ? `${prefix}.${name}` : name;
    out.add(path);
    fieldPaths(child, path, out, open);
  }
  if (node.items) fieldPaths(node.items, `${prefix}[]`, out, open);
  if (typeof node.additionalProperties === "object") fieldPaths(node.additionalProperties, `${prefix}{}`, out, open);
}

/** The fields of `wanted` that `installed` would drop. */
export function missingFields(installed: unknown, wanted: unknown): string[] {
  const have = new Set<string>();
  const open = new Set<string>();
  fieldPaths(installed as SchemaNode, "", have, open);
  const want = new Set<string>();
  fieldPaths(wanted as SchemaNode, "", want, new Set());
  const kept = (path: string) => have.has(path) || [...open].some((prefix) => prefix === "" || path.startsWith(`${prefix}.`) || path.startsWith(`${prefix}[`) || path.startsWith(`${prefix}{`));
  return [...want].filter((path) => !path.startsWith("metadata.") && !kept(path));
}

const openApiSchema = (crd: unknown): unknown =>
  (crd as { spec?: { versions?: Array<{ name: string; schema?: { openAPIV3Schema?: unknown } }> } }).spec?.versions?.find((v) => v.name === VERSION)?.schema?.openAPIV3Schema;

/**
 * Throws CrdsOutdatedError when an installed CRD lacks a field of `wanted` (this version's CRDs).
 * An operator that cannot read them (no permission, the API server failing or slow) says so and
 * goes on: the check is a safety net, and the operator's own start retries the API server.
 * Resolves false when it could not look (the API server failing or slow), so it can be tried again.
 */
export async function checkInstalledCrds(api: ApiextensionsV1Api, log: Logger, wanted = KINDS.map(buildCrd), timeoutMs = CHECK_TIMEOUT_MS): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), timeoutMs)));
  try {
    const result = await Promise.race([compare(api, log, wanted), timedOut]);
    if (result !== "timeout") return true;
    log.warn({ timeoutMs }, "could not check that the installed CRDs are this version's: the API server did not answer in time");
    return false;
  } catch (err) {
    if (err instanceof CrdsOutdatedError) throw err;
    log.warn({ err: apiErrorMessage(err) }, "could not check that the installed CRDs are this version's");
    return false;
  } finally {
    clearTimeout(timer);
  }
}

const CHECK_TIMEOUT_MS = 10_000;

async function compare(api: ApiextensionsV1Api, log: Logger, wanted: unknown[]): Promise<void> {
  const missing: string[] = [];
  for (const crd of wanted) {
    const name = (crd as { metadata: { name: string } }).metadata.name;
    let installed: unknown;
    try {
      installed = await api.readCustomResourceDefinition({ name });
    } catch (err) {
      if (apiStatus(err) === 403) {
        log.warn({ crd: name, err: apiErrorMessage(err) }, `cannot read the CRDs to check that they are this version's (grant get on customresourcedefinitions.apiextensions.k8s.io ${GROUP})`);
        return;
      }
      if (apiStatus(err) === 404) {
        missing.push(`${name} (not installed)`);
        continue;
      }
      throw err;
    }
    const schema = openApiSchema(installed);
    if (!schema) {
      missing.push(`${name} version ${VERSION}`);
      continue;
    }
    for (const field of missingFields(schema, openApiSchema(crd))) missing.push(`${name} ${field}`);
  }
  if (missing.length > 0) throw new CrdsOutdatedError(missing);
}
