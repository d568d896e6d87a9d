// Turns documents (Source, WebhookDestination, Secret) into the compiled config the data plane
// runs on. Every problem is collected and reported at once, each naming its document and field.
import { createHash } from "node:crypto";
import {
  describeErrors,
  parseDuration,
  validateCompiledConfig,
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
import { ConfigError } from "./errors.ts";
import type { RawDocument } from "./load.ts";

export const DEFAULT_NAMESPACE = "default";

export function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

interface Located<T> {
  origin: string;
  doc: T;
  namespace: string;
}

export function compileConfig(documents: RawDocument[]): CompiledConfig {
  const problems: string[] = [];
  const sources: Located<SourceDocument>[] = [];
  const destinations: Located<WebhookDestinationDocument>[] = [];
  const secrets = new Map<string, Map<string, string>>(); // "ns/name" -> key -> value

  for (const { origin, body } of documents) {
    const kind = (body as { kind?: unknown })?.kind;
    const name = (body as { metadata?: { name?: unknown } })?.metadata?.name;
    const label = `${origin} (${typeof kind === "string" ? kind : "no kind"}${typeof name === "string" ? ` ${name}` : ""})`;
    const check = (valid: boolean, errors: Parameters<typeof describeErrors>[0]) => {
      if (!valid) for (const problem of describeErrors(errors)) problems.push(`${label}: ${problem}`);
      return valid;
    };
    switch (kind) {
      case "Source":
        if (check(validateSourceDocument(body), validateSourceDocument.errors)) sources.push(locate(origin, body as SourceDocument));
        break;
      case "WebhookDestination":
        if (check(validateWebhookDestinationDocument(body), validateWebhookDestinationDocument.errors)) {
          destinations.push(locate(origin, body as WebhookDestinationDocument));
        }
        break;
      case "Secret":
        if (check(validateSecretDocument(body), validateSecretDocument.errors)) {
          const secret = locate(origin, body as SecretDocument);
          secrets.set(`${secret.namespace}/${secret.doc.metadata.name}`, secretValues(secret.doc));
        }
        break;
      default:
        problems.push(`${label}: kind must be one of Source, WebhookDestination, Secret`);
    }
  }

  const secretValue = (origin: string, field: string, namespace: string, ref: { name: string; key: string }) => {
    const secret = secrets.get(`${namespace}/${ref.name}`);
    const value = secret?.get(ref.key);
    if (!secret) {
      problems.push(`${origin}: ${field}: Secret ${namespace}/${ref.name} is not in the config`);
    } else if (value === undefined) {
      problems.push(`${origin}: ${field}: Secret ${namespace}/${ref.name} has no key "${ref.key}"`);
    } else if (value.length === 0) {
      problems.push(`${origin}: ${field}: Secret ${namespace}/${ref.name} key "${ref.key}" is empty`);
    }
    return value;
  };

  checkUnique(sources, "Source", problems);
  checkUnique(destinations, "WebhookDestination", problems);

  const compiledSources: CompiledSource[] = [];
  const digests = new Map<string, string>();
  for (const { origin, doc, namespace } of sources) {
    const label = `${origin} (Source ${doc.metadata.name})`;
    const key = secretValue(label, "spec.writeKeySecretRef", namespace, doc.spec.writeKeySecretRef);
    if (!key) continue;
    const digest = sha256Hex(key);
    const other = digests.get(digest);
    if (other) problems.push(`${label}: spec.writeKeySecretRef: the same write key is already used by Source ${other}`);
    digests.set(digest, `${namespace}/${doc.metadata.name}`);
    compiledSources.push({
      namespace,
      name: doc.metadata.name,
      enabled: doc.spec.enabled ?? true,
      writeKeySha256: digest,
      ...(doc.spec.displayName ? { displayName: doc.spec.displayName } : {}),
    });
  }

  const compiledDestinations: CompiledDestination[] = [];
  for (const { origin, doc, namespace } of destinations) {
    const label = `${origin} (WebhookDestination ${doc.metadata.name})`;
    const spec = doc.spec;
    const inNamespace = sources.filter((s) => s.namespace === namespace);
    let sourceNames: string[];
    if (spec.sources) {
      sourceNames = spec.sources;
      for (const [i, name] of spec.sources.entries()) {
        if (!inNamespace.some((s) => s.doc.metadata.name === name)) {
          problems.push(`${label}: spec.sources[${i}]: no Source "${name}" in namespace ${namespace}`);
        }
      }
    } else {
      const wanted = Object.entries(spec.sourceSelector?.matchLabels ?? {});
      sourceNames = inNamespace
        .filter((s) => wanted.every(([k, v]) => s.doc.metadata.labels?.[k] === v))
        .map((s) => s.doc.metadata.name);
    }
    const headers = (spec.headers ?? []).map((header, i) => ({
      name: header.name,
      value: header.valueFrom
        ? (secretValue(label, `spec.headers[${i}].valueFrom.secretKeyRef`, namespace, header.valueFrom.secretKeyRef) ?? "")
        : (header.value ?? ""),
    }));
    const sharedSecret = spec.sharedSecretRef ? secretValue(label, "spec.sharedSecretRef", namespace, spec.sharedSecretRef) : undefined;
    if (spec.standardWebhooks && !spec.sharedSecretRef) {
      problems.push(`${label}: spec.standardWebhooks: needs spec.sharedSecretRef (the signature's key)`);
    }
    compiledDestinations.push({
      namespace,
      name: doc.metadata.name,
      enabled: spec.enabled ?? true,
      sources: sourceNames,
      urls: spec.urls,
      headers,
      ...(sharedSecret ? { sharedSecret } : {}),
      timeoutMs: parseDuration(spec.timeout ?? "5s"),
      retryWindowMs: parseDuration(spec.retryWindow ?? "4h"),
      maxInFlight: spec.maxInFlight ?? 100,
      standardWebhooks: spec.standardWebhooks ?? false,
    });
  }

  if (problems.length > 0) throw new ConfigError(problems);
  const compiled: CompiledConfig = { sources: compiledSources, destinations: compiledDestinations };
  if (!validateCompiledConfig(compiled)) throw new ConfigError(describeErrors(validateCompiledConfig.errors));
  return compiled;
}

function locate<T extends { metadata: { namespace?: string } }>(origin: string, doc: T): Located<T> {
  return { origin, doc, namespace: doc.metadata.namespace ?? DEFAULT_NAMESPACE };
}

function secretValues(doc: SecretDocument): Map<string, string> {
  const values = new Map<string, string>();
  for (const [key, value] of Object.entries(doc.data ?? {})) values.set(key, Buffer.from(value, "base64").toString("utf8"));
  // As in Kubernetes, stringData wins over data for the same key.
  for (const [key, value] of Object.entries(doc.stringData ?? {})) values.set(key, value);
  return values;
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
