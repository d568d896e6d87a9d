// Compiles one Source or WebhookDestination into its data-plane form. Shared by the `--config`
// loader (all documents at once) and the operator (one object per reconcile), so a resource
// means the same thing on a laptop and in a cluster.
import { createHash } from "node:crypto";
// The one function of delivery that config needs, from its file: compile judges URLs by the
// rules delivery dials by, and ingest (which compiles config too) need not load the HTTP client.
// eslint-disable-next-line no-restricted-imports
import { urlReachesOnlyPrivate } from "../delivery/ssrf.ts";
import {
  ADDITIONAL_SECRETS_REASON,
  HEADER_VALUE,
  HEADER_VALUE_REASON,
  RESERVED_HEADER_REASON,
  RESERVED_WEBHOOK_HEADERS,
  RETRY_WINDOW_BOUNDS,
  TIMEOUT_BOUNDS,
  URL_DUPLICATE_REASON,
  URL_HOST_REASON,
  durationBoundsReason,
  parseDuration,
  type CompiledDestination,
  type DurationBounds,
  type CompiledSource,
  type SourceDocument,
  type WebhookDestinationDocument,
} from "../../schema/mod.ts";

export function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** The values of a Secret by key, or undefined when there is no such Secret. */
export type SecretLookup = (namespace: string, name: string) => ReadonlyMap<string, string> | RefusedSecret | undefined;

/** A Secret that exists but may not be read (the operator's --require-secret-label): why. */
export class RefusedSecret {
  readonly why: string;
  constructor(why: string) {
    this.why = why;
  }
}

/** A Secret's values from its `data` (base64) and `stringData`, which wins as in Kubernetes. */
export function secretValues(secret: { data?: Record<string, string> | undefined; stringData?: Record<string, string> | undefined }): Map<string, string> {
  const values = new Map<string, string>();
  for (const [key, value] of Object.entries(secret.data ?? {})) values.set(key, Buffer.from(value, "base64").toString("utf8"));
  for (const [key, value] of Object.entries(secret.stringData ?? {})) values.set(key, value);
  return values;
}

/** Why a resource cannot take effect; `reason` is the CamelCase reason of its Ready condition. */
export interface Problem {
  reason: "SecretNotFound" | "SecretNotLabelled" | "SecretKeyMissing" | "SecretKeyEmpty" | "SecretValueInvalid" | "SourceNotFound" | "InvalidSpec" | "PrivateAddressRefused";
  field: string;
  message: string;
}

export type CompileResult<T> = { ok: true; value: T } | { ok: false; problems: Problem[] };

interface SecretRef {
  name: string;
  key: string;
}

/** Every Secret a resource reads, so callers can fetch them (and watch them) before compiling. */
export function secretNamesOf(doc: SourceDocument | WebhookDestinationDocument): string[] {
  const refs: SecretRef[] =
    "writeKeySecretRef" in doc.spec
      ? [doc.spec.writeKeySecretRef, ...(doc.spec.additionalWriteKeySecretRefs ?? [])]
      : [
          ...(doc.spec.sharedSecretRef ? [doc.spec.sharedSecretRef] : []),
          ...(doc.spec.additionalSharedSecretRefs ?? []),
          ...(doc.spec.headers ?? []).flatMap((h) => (h.valueFrom ? [h.valueFrom.secretKeyRef] : [])),
        ];
  return [...new Set(refs.map((r) => r.name))];
}

function secretValue(lookup: SecretLookup, namespace: string, field: string, ref: SecretRef, problems: Problem[]): string | undefined {
  const secret = lookup(namespace, ref.name);
  if (secret instanceof RefusedSecret) {
    problems.push({ reason: "SecretNotLabelled", field, message: secret.why });
    return undefined;
  }
  const value = secret?.get(ref.key);
  if (!secret) {
    problems.push({ reason: "SecretNotFound", field, message: `Secret ${namespace}/${ref.name} does not exist` });
  } else if (value === undefined) {
    problems.push({ reason: "SecretKeyMissing", field, message: `Secret ${namespace}/${ref.name} has no key "${ref.key}"` });
  } else if (value.length === 0) {
    problems.push({ reason: "SecretKeyEmpty", field, message: `Secret ${namespace}/${ref.name} key "${ref.key}" is empty` });
  } else {
    return value;
  }
  return undefined;
}

/**
 * A validated Source document (schema defaults applied) → its compiled form, keys as digests only.
 * An additional key that cannot be read is left out and reported in `skipped`, not refused: the
 * old key's Secret deleted before its reference would otherwise stop the source's every key.
 */
export function compileSource(namespace: string, doc: SourceDocument, secrets: SecretLookup): CompileResult<CompiledSource> & { skipped?: SkippedKey[] } {
  const problems: Problem[] = [];
  const key = writeKey(secrets, namespace, "spec.writeKeySecretRef", doc.spec.writeKeySecretRef, problems);
  if (key === undefined) return { ok: false, problems };
  const skipped: SkippedKey[] = [];
  const additional = new Map<string, string>();
  (doc.spec.additionalWriteKeySecretRefs ?? []).forEach((ref, i) => {
    const secretKey = `${ref.name}/${ref.key}`;
    const unread: Problem[] = [];
    const value = writeKey(secrets, namespace, `spec.additionalWriteKeySecretRefs[${i}]`, ref, unread);
    skipped.push(...unread.map((p) => ({ ...p, secretKey })));
    if (value === undefined || value === key) return; // the main key listed again: accepted once
    const digest = sha256Hex(value);
    if (!additional.has(digest)) additional.set(digest, secretKey); // one key twice: accepted once
  });
  return {
    ok: true,
    value: {
      namespace,
      name: doc.metadata.name,
      enabled: doc.spec.enabled ?? true,
      writeKeySha256: sha256Hex(key),
      ...(additional.size > 0 ? { additionalWriteKeys: [...additional].map(([sha256, secretKey]) => ({ sha256, secretKey })) } : {}),
      ...(doc.spec.displayName ? { displayName: doc.spec.displayName } : {}),
      ...(doc.spec.rateLimit
        ? { rateLimit: { perSecond: doc.spec.rateLimit.messagesPerSecond, burst: doc.spec.rateLimit.burst ?? doc.spec.rateLimit.messagesPerSecond } }
        : {}),
    },
    ...(skipped.length > 0 ? { skipped } : {}),
  };
}

function sharedSecretValue(secrets: SecretLookup, namespace: string, field: string, ref: SecretRef, problems: Problem[]): string | undefined {
  const secret = secretValue(secrets, namespace, field, ref, problems);
  if (secret !== undefined && secret.trim() !== secret) {
    // The receiver holds the secret without it: every signature would be wrong.
    problems.push({ reason: "SecretValueInvalid", field, message: `the shared secret in Secret ${namespace}/${ref.name} starts or ends with whitespace (a trailing newline from --from-file?)` });
    return undefined;
  }
  return secret;
}

function writeKey(secrets: SecretLookup, namespace: string, field: string, ref: SecretRef, problems: Problem[]): string | undefined {
  const key = secretValue(secrets, namespace, field, ref, problems);
  if (key !== undefined && key.trim() !== key) {
    // SDKs send the key verbatim; a stray newline (kubectl create secret --from-file) would make
    // every request a 401 while the Source looked fine.
    problems.push({ reason: "SecretValueInvalid", field, message: `the write key in Secret ${namespace}/${ref.name} starts or ends with whitespace (a trailing newline?)` });
    return undefined;
  }
  return key;
}

/** An additional key left out, and the Secret and key it names (`<name>/<key>`). */
export type SkippedKey = Problem & { secretKey: string };

/** Every write-key digest a compiled source holds (reserved ones too), the main one first. */
export function writeKeyDigests(source: Pick<CompiledSource, "writeKeySha256" | "additionalWriteKeys" | "reservedWriteKeys">): string[] {
  return [source.writeKeySha256, ...[...(source.additionalWriteKeys ?? []), ...(source.reservedWriteKeys ?? [])].map((k) => k.sha256)];
}

export interface SourceRef {
  name: string;
  labels?: Record<string, string> | undefined;
}

/** The Sources a destination receives: its `sources` list, or those its selector matches. */
export function resolveSourceNames(spec: WebhookDestinationDocument["spec"], sources: readonly SourceRef[]): string[] {
  if (spec.sources) return spec.sources;
  const wanted = Object.entries(spec.sourceSelector?.matchLabels ?? {});
  return sources.filter((s) => wanted.every(([k, v]) => s.labels?.[k] === v)).map((s) => s.name);
}

const RESERVED_HEADERS = new Set(RESERVED_WEBHOOK_HEADERS);
const HEADER_VALUE_RE = new RegExp(HEADER_VALUE);

const PRIVATE_URL_REASON =
  "reaches only a private, loopback or cluster-internal address, which delivery refuses (it runs without --allow-private-networks: the chart's delivery.allowPrivateNetworks)";

/**
 * A webhook URL, or why it could never be sent to. The schema's pattern lets through what only a
 * URL parser can refuse: "http://:8080/" (no host) or a port past 65535 would dead-letter every
 * message as `network_error` while the destination looked fine. Port 0 parses but cannot be
 * dialled.
 */
function webhookUrl(text: string): URL | string {
  // The authority as written: new URL() refuses both cases with the same bare "Invalid URL".
  const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(text)?.[1] ?? "";
  const [, host = "", port] = /^(\[[^\]]*\]|[^:]*)(?::(.*))?$/.exec(authority) ?? [];
  if (host === "" || (port !== undefined && port !== "" && !(/^[0-9]+$/.test(port) && Number(port) >= 1 && Number(port) <= 65535))) {
    return URL_HOST_REASON;
  }
  return URL.parse(text) ?? "is not a valid URL (a malformed host?)";
}

/** A duration field within its bounds, in ms; a problem naming the field otherwise. */
function boundedDuration(field: string, text: string, bounds: DurationBounds, problems: Problem[]): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (err) {
    problems.push({ reason: "InvalidSpec", field, message: (err as Error).message });
    return 0;
  }
  // Within bounds also keeps it a safe integer, and ack_wait (timeout + 30 s) within JetStream's range.
  if (!(ms >= parseDuration(bounds.min) && ms <= parseDuration(bounds.max))) {
    problems.push({ reason: "InvalidSpec", field, message: `${text} ${durationBoundsReason(bounds)}` });
  }
  return ms;
}

export interface CompileDestinationOptions {
  /**
   * Where the document comes from, for where its consumer starts: the operator tracks when a
   * destination took effect (status.inEffectSince); a `--config` file has no such record.
   */
  origin?: "operator" | "file";
  now?: number;
  /** For a `--config` document: when its file was last written. */
  fileModifiedAt?: number;
  /**
   * Refuse URLs that can only reach private addresses (an IP literal of a private range,
   * localhost, a cluster-internal name): the operator, when delivery runs without
   * --allow-private-networks. Delivery refuses them anyway, at each attempt, which dead-lettered
   * every message while the destination said Ready. Names that resolve to private addresses
   * otherwise are only found at connect time.
   */
  refusePrivateNetworks?: boolean;
}

/**
 * A validated WebhookDestination → its compiled form, with Secrets read and the source selector
 * resolved against `sources` (the Sources of its namespace).
 */
export function compileDestination(
  namespace: string,
  doc: WebhookDestinationDocument,
  sources: readonly SourceRef[],
  secrets: SecretLookup,
  { origin = "file", now = Date.now(), refusePrivateNetworks = false, fileModifiedAt }: CompileDestinationOptions = {},
): CompileResult<CompiledDestination> {
  const spec = doc.spec;
  const problems: Problem[] = [];
  const sourceNames = resolveSourceNames(spec, sources);
  // The operator keeps a listed Source that does not exist (yet, or any more) in the filter and
  // says so in Ready (SourceNotAccepting): a destination must keep taking spec changes, and keep
  // delivering a deleted source's backlog, while Git still lists it (found by a GitOps review).
  for (const [i, name] of (origin === "operator" ? [] : (spec.sources ?? [])).entries()) {
    if (!sources.some((s) => s.name === name)) {
      problems.push({ reason: "SourceNotFound", field: `spec.sources[${i}]`, message: `no Source "${name}" in namespace ${namespace}` });
    }
  }
  const seen = new Set<string>();
  const headers = (spec.headers ?? []).map((header, i) => {
    const lower = header.name.toLowerCase();
    if (RESERVED_HEADERS.has(lower)) {
      problems.push({ reason: "InvalidSpec", field: `spec.headers[${i}].name`, message: `${header.name} ${RESERVED_HEADER_REASON}` });
    } else if (seen.has(lower)) {
      problems.push({ reason: "InvalidSpec", field: `spec.headers[${i}].name`, message: `${header.name} is given twice (header names are case-insensitive)` });
    }
    seen.add(lower);
    const field = header.valueFrom ? `spec.headers[${i}].valueFrom.secretKeyRef` : `spec.headers[${i}].value`;
    const value = header.valueFrom ? (secretValue(secrets, namespace, field, header.valueFrom.secretKeyRef, problems) ?? "") : (header.value ?? "");
    // undici refuses such a value before sending: every message would be dead-lettered while Ready said True.
    const reason = header.valueFrom ? "SecretValueInvalid" : "InvalidSpec";
    if (/[\r\n\0]/.test(value)) {
      problems.push({ reason, field, message: `the value of header ${header.name} contains a line break or NUL (a trailing newline from --from-file?)` });
    } else if (!HEADER_VALUE_RE.test(value)) {
      // A literal value's offending character is shown; a Secret's value is never.
      const bad = header.valueFrom ? undefined : [...value].find((c) => !HEADER_VALUE_RE.test(c));
      const shown = bad === undefined ? "" : `; it has U+${bad.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
      problems.push({ reason, field, message: `the value of header ${header.name} ${HEADER_VALUE_REASON}${shown}` });
    }
    return { name: header.name, value };
  });
  const urls = new Map<string, number>(); // normalised URL -> its first index
  for (const [i, text] of spec.urls.entries()) {
    const url = webhookUrl(text);
    if (typeof url === "string") {
      problems.push({ reason: "InvalidSpec", field: `spec.urls[${i}]`, message: url });
      continue;
    }
    if (refusePrivateNetworks && urlReachesOnlyPrivate(url)) {
      problems.push({ reason: "PrivateAddressRefused", field: `spec.urls[${i}]`, message: PRIVATE_URL_REASON });
      continue;
    }
    const href = url.href; // "https://A.example" and "https://a.example/" are one receiver
    const first = urls.get(href);
    if (first !== undefined) problems.push({ reason: "InvalidSpec", field: `spec.urls[${i}]`, message: `${URL_DUPLICATE_REASON} (as spec.urls[${first}])` });
    else urls.set(href, i);
  }
  const timeoutMs = boundedDuration("spec.timeout", spec.timeout ?? "5s", TIMEOUT_BOUNDS, problems);
  const retryWindowMs = boundedDuration("spec.retryWindow", spec.retryWindow ?? "4h", RETRY_WINDOW_BOUNDS, problems);
  const sharedSecret = spec.sharedSecretRef ? sharedSecretValue(secrets, namespace, "spec.sharedSecretRef", spec.sharedSecretRef, problems) : undefined;
  // Unlike a Source's additional write key, one that cannot be read is a problem like any other:
  // the last good config keeps delivering (and signing) meanwhile, so nothing stops.
  const additionalSharedSecrets = new Set<string>();
  (spec.additionalSharedSecretRefs ?? []).forEach((ref, i) => {
    const value = sharedSecretValue(secrets, namespace, `spec.additionalSharedSecretRefs[${i}]`, ref, problems);
    // The main secret listed again, or one secret twice: kept once (and one key written two
    // ways, with and without whsec_, signs once: signingKeys).
    if (value !== undefined && value !== sharedSecret) additionalSharedSecrets.add(value);
  });
  if (spec.standardWebhooks && !spec.sharedSecretRef) {
    problems.push({ reason: "InvalidSpec", field: "spec.standardWebhooks", message: "needs spec.sharedSecretRef (the signature's key)" });
  }
  if ((spec.additionalSharedSecretRefs ?? []).length > 0 && !spec.standardWebhooks) {
    problems.push({ reason: "InvalidSpec", field: "spec.additionalSharedSecretRefs", message: ADDITIONAL_SECRETS_REASON });
  }
  if (problems.length > 0) return { ok: false, problems };
  return {
    ok: true,
    value: {
      namespace,
      name: doc.metadata.name,
      enabled: spec.enabled ?? true,
      sources: sourceNames,
      urls: spec.urls,
      headers,
      ...(sharedSecret ? { sharedSecret } : {}),
      ...(additionalSharedSecrets.size > 0 ? { additionalSharedSecrets: [...additionalSharedSecrets] } : {}),
      timeoutMs,
      retryWindowMs,
      maxInFlight: spec.maxInFlight ?? 100,
      standardWebhooks: spec.standardWebhooks ?? false,
      ...createdAt(doc.metadata, origin === "operator" ? ((doc as { status?: { inEffectSince?: string } }).status ?? {}) : undefined, now, fileModifiedAt),
      ...(origin === "operator" ? deliveringSince((doc as { status?: { deliveringSince?: string } }).status) : {}),
    },
  };
}

/**
 * When a destination not yet in effect was created, as ISO text: its consumer starts there,
 * however late it is made (its Secret applied after it, a typo fixed by a second apply), so
 * nothing stored since its creation misses it. Once its config has taken effect
 * (status.inEffectSince, written by the operator), a consumer made again (enabled again) starts
 * from then instead. A `--config` document has no such record: its creationTimestamp (a
 * `kubectl get -o yaml` export carries one) counts for FILE_NEW_DESTINATION_MS only, so that
 * enabling it again later does not replay the stream. The timestamp is checked: a --config file
 * may hold any text there. Without one, the time its file was last written stands in for it:
 * a Source added with it in the same edit is accepted by an ingest from then on, maybe before
 * delivery has read the file, and its first messages must not miss the new destination. (A file
 * moved out and back keeps its time: delivery checks for attempt records before it uses it.)
 */
function createdAt(
  { creationTimestamp }: { creationTimestamp?: string },
  operatorStatus: { inEffectSince?: string } | undefined,
  now: number,
  fileModifiedAt: number | undefined,
): { createdAt?: string } {
  const given = creationTimestamp !== undefined ? Date.parse(creationTimestamp) : NaN;
  const time = Number.isNaN(given) && operatorStatus === undefined && fileModifiedAt !== undefined ? Math.floor(fileModifiedAt) : given;
  if (Number.isNaN(time)) return {};
  const isNew = operatorStatus !== undefined ? operatorStatus.inEffectSince === undefined : now - time <= FILE_NEW_DESTINATION_MS;
  return isNew ? { createdAt: new Date(time).toISOString() } : {};
}

/** The operator's record of since when the destination has been enabled without a break, if it is a time. */
function deliveringSince(status: { deliveringSince?: string } | undefined): { deliveringSince?: string } {
  const since = status?.deliveringSince !== undefined ? Date.parse(status.deliveringSince) : NaN;
  return Number.isNaN(since) ? {} : { deliveringSince: new Date(since).toISOString() };
}

/** How long after its creationTimestamp a `--config` destination still counts as new. */
export const FILE_NEW_DESTINATION_MS = 10 * 60_000;
