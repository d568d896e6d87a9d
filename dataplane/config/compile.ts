// Turns documents (Source, WebhookDestination, Secret) into the compiled config the data plane
// runs on. Every problem is collected and reported at once, each naming its document and field.
import {
  describeErrors,
  validateCompiledConfig,
  validateDeletionRequestDocument,
  validateSecretDocument,
  validateSourceDocument,
  validateWebhookDestinationDocument,
  type CompiledConfig,
  type CompiledDestination,
  type CompiledSource,
  type SecretDocument,
  type SourceDocument,
  type WebhookDestinationDocument,
} from "../../schema/mod.ts";
import { compileDestination, compileSource, RefusedSecret, secretValues, writeKeyDigests, type SecretLookup } from "./compile-resource.ts";
import { ConfigError } from "./errors.ts";
import type { RawDocument } from "./load.ts";

export const DEFAULT_NAMESPACE = "default";

/**
 * The part of the config a component follows. Ingest needs the Sources (write key digests) only
 * and delivery the destinations (with their shared secrets) only: with one key filter each, NATS
 * permissions can keep the internet-facing ingest from ever reading a shared secret
 * (docs/nats-permissions.conf); from files, each needs only its part's Secrets.
 */
export type ConfigPart = "all" | "sources" | "destinations";

interface Located<T> {
  origin: string;
  doc: T;
  namespace: string;
  modifiedAt?: number;
}

/**
 * Every document is checked against its schema; only `part`'s resources are compiled, with their
 * Secrets: a delivery's copy of the files needs no write keys, an ingest's no shared secrets (the
 * other part is empty, as the bucket's part is to a component that follows only its own).
 */
export function compileConfig(documents: RawDocument[], part: ConfigPart = "all", passedOver?: string[]): CompiledConfig {
  const problems: string[] = [];
  const sources: Located<SourceDocument>[] = [];
  const destinations: Located<WebhookDestinationDocument>[] = [];
  const secrets = new Map<string, Map<string, string>>(); // "ns/name" -> key -> value
  const invalidSecrets = new Set<string>(); // "ns/name": reported already, not "does not exist" again

  for (const { origin, body, modifiedAt } of documents) {
    const kind = (body as { kind?: unknown })?.kind;
    const name = (body as { metadata?: { name?: unknown } })?.metadata?.name;
    const label = `${origin} (${typeof kind === "string" ? kind : "no kind"}${typeof name === "string" ? ` ${name}` : ""})`;
    const check = (valid: boolean, errors: Parameters<typeof describeErrors>[0]) => {
      if (!valid) for (const problem of describeErrors(errors)) problems.push(`${label}: ${problem}`);
      return valid;
    };
    const apiVersion = (body as { apiVersion?: unknown })?.apiVersion;
    const ours = typeof apiVersion === "string" && apiVersion.startsWith("trackhook.io/");
    // The API server drops a null where its schema allows none (`displayName: ~`, and the
    // `creationTimestamp: null` of `kubectl create --dry-run -o yaml`): so do files.
    if (ours) {
      dropNulls((body as { spec?: unknown }).spec);
      dropNulls((body as { metadata?: unknown }).metadata);
    }
    if (kind === "Secret") dropNulls(body, 2); // `data:` left empty by a template, and its metadata
    // Encrypted with SOPS (Flux decrypts it when it applies it): its values are ciphertext. Passed
    // over, said, so that the plain Secret of a git-ignored file beside it is the one read (found by
    // a review: refused, the folder's every Source was).
    if (body !== null && typeof body === "object" && "sops" in body) {
      passedOver?.push(`${label}: passed over: encrypted with SOPS; give this process the decrypted ${typeof kind === "string" ? kind : "document"} in a file of its own (one that Git ignores)`);
      continue;
    }
    switch (kind) {
      case "Source":
        if (check(validateSourceDocument(body), validateSourceDocument.errors)) sources.push(locate(origin, body as SourceDocument));
        break;
      case "WebhookDestination":
        if (check(validateWebhookDestinationDocument(body), validateWebhookDestinationDocument.errors)) {
          destinations.push({ ...locate(origin, body as WebhookDestinationDocument), ...(modifiedAt !== undefined ? { modifiedAt } : {}) });
        }
        break;
      case "Secret":
        if (check(validateSecretDocument(body), validateSecretDocument.errors)) {
          const secret = locate(origin, body as SecretDocument);
          secrets.set(`${secret.namespace}/${secret.doc.metadata.name}`, secretValues(secret.doc));
        } else if (typeof name === "string") {
          const namespace = (body as { metadata?: { namespace?: unknown } }).metadata?.namespace;
          invalidSecrets.add(`${typeof namespace === "string" ? namespace : DEFAULT_NAMESPACE}/${name}`);
        }
        break;
      case "DeletionRequest":
        // A request acts once, when created, and a config file is read again on every change: from
        // files, one is checked and passed over, said (found by a review: refused, it stopped dev
        // and delete-user on a GitOps folder that keeps them beside its Sources).
        if (check(validateDeletionRequestDocument(body), validateDeletionRequestDocument.errors)) {
          passedOver?.push(`${label}: passed over: the operator acts on a DeletionRequest in a cluster; without one, send its notices with \`trackhook delete-user --config <file|dir> --source <ns/name> --user-id <id>\``);
        }
        break;
      default: {
        // A directory applied with `kubectl apply -f` holds other kinds too (the Namespace, a
        // Deployment): those are not ours to judge. A trackhook.io kind we do not know, or a
        // document with no kind, is a mistake.
        if (typeof kind === "string" && typeof apiVersion === "string" && !ours) break;
        problems.push(`${label}: kind must be one of Source, WebhookDestination, DeletionRequest, Secret`);
      }
    }
  }

  checkUnique(sources, "Source", problems);
  checkUnique(destinations, "WebhookDestination", problems);
  const lookup: SecretLookup = (namespace, name) =>
    secrets.get(`${namespace}/${name}`) ?? (invalidSecrets.has(`${namespace}/${name}`) ? new RefusedSecret(`Secret ${namespace}/${name} is not valid (see its document)`) : undefined);

  const compiledSources: CompiledSource[] = [];
  const digests = new Map<string, string>();
  for (const { origin, doc, namespace } of part === "destinations" ? [] : sources) {
    const label = `${origin} (Source ${doc.metadata.name})`;
    const result = compileSource(namespace, doc, lookup);
    // A file is read whole before anything changes: a key that cannot be read is an error here,
    // where the operator would skip it and keep the source's other keys working.
    const unread = result.ok ? (result.skipped ?? []) : result.problems;
    problems.push(...unread.map((p) => `${label}: ${p.field}: ${p.message}`));
    if (!result.ok) continue;
    writeKeyDigests(result.value).forEach((digest, i) => {
      const other = digests.get(digest);
      const field = i === 0 ? "spec.writeKeySecretRef" : "spec.additionalWriteKeySecretRefs";
      if (other) problems.push(`${label}: ${field}: the same write key is already used by Source ${other}`);
      digests.set(digest, `${namespace}/${doc.metadata.name}`);
    });
    compiledSources.push(result.value);
  }

  const compiledDestinations: CompiledDestination[] = [];
  for (const { origin, doc, namespace, modifiedAt } of part === "sources" ? [] : destinations) {
    const label = `${origin} (WebhookDestination ${doc.metadata.name})`;
    const inNamespace = sources.filter((s) => s.namespace === namespace).map((s) => s.doc.metadata);
    const result = compileDestination(namespace, doc, inNamespace, lookup, modifiedAt !== undefined ? { fileModifiedAt: modifiedAt } : {});
    if (result.ok) compiledDestinations.push(result.value);
    else problems.push(...result.problems.map((p) => `${label}: ${p.field}: ${p.message}`));
  }

  if (problems.length > 0) throw new ConfigError(problems);
  const compiled: CompiledConfig = { sources: compiledSources, destinations: compiledDestinations };
  if (!validateCompiledConfig(compiled)) throw new ConfigError(describeErrors(validateCompiledConfig.errors));
  return compiled;
}

/** Removes every null-valued field, down to `depth` levels of objects (1: the object's own fields). */
function dropNulls(value: unknown, depth = Infinity): void {
  if (value === null || typeof value !== "object" || depth < 1) return;
  if (Array.isArray(value)) {
    for (const item of value) dropNulls(item, depth);
    return;
  }
  for (const [key, field] of Object.entries(value)) {
    if (field === null) delete (value as Record<string, unknown>)[key];
    else dropNulls(field, depth - 1);
  }
}

function locate<T extends { metadata: { namespace?: string } }>(origin: string, doc: T): Located<T> {
  return { origin, doc, namespace: doc.metadata.namespace ?? DEFAULT_NAMESPACE };
}

function checkUnique(items: Located<{ metadata: { name: string } }>[], kind: string, problems: string[]) {
  const seen = new Map<string, string>();
  for (const { origin, doc, namespace } of items) {
    const id = `${namespace}/${doc.metadata.name}`;
    const first = seen.get(id);
    if (first) problems.push(`${origin}: ${kind} ${id} is also defined in ${first}`);
    else seen.set(id, origin);
  }
}
