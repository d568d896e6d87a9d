// The custom resources users write (Source, WebhookDestination, DeletionRequest), their statuses,
// and the Secrets they reference.
// One definition serves three readers: the CRDs in crds/ (generated), the `--config` loader of
// `trackhook dev|ingest|deliver` (ajv), and the TypeScript types of both (Static<>).
import { Type, type Static, type TSchema } from "@sinclair/typebox";
import { DURATION_PATTERN } from "./duration.ts";

export const GROUP = "trackhook.io";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}`;

/** RFC 1123 label: Source and destination names become NATS subject tokens, so no dots. */
export const DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
const DNS_LABEL_RE = new RegExp(DNS_LABEL);
/** A name the schemas would take as a DNS label (at most 63 characters): safe as a subject token. */
export const isDnsLabel = (name: string): boolean => name.length <= 63 && DNS_LABEL_RE.test(name);
const DNS_SUBDOMAIN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
const SECRET_KEY = "^[-._a-zA-Z0-9]+$";
const HEADER_NAME = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";

const SecretKeySelector = (what: string) =>
  Type.Object(
    {
      name: Type.String({ minLength: 1, maxLength: 253, pattern: DNS_SUBDOMAIN, description: `Name of the Secret holding ${what}, in the same namespace.` }),
      key: Type.String({ minLength: 1, maxLength: 253, pattern: SECRET_KEY, description: `Key inside the Secret whose value is ${what}.` }),
    },
    { additionalProperties: false, description: `Reference to ${what} in a Secret of the same namespace.` },
  );

/**
 * A source's messages a second, per ingest replica. The events stream is shared: one source
 * sending far more than it should (a loop in an app, a backfill) would otherwise fill it, and
 * every source would get 503 storage_full until its messages aged out. Beyond the limit a request
 * gets 429 with Retry-After, which every Segment SDK retries.
 */
export const SourceRateLimit = Type.Object(
  {
    messagesPerSecond: Type.Integer({
      minimum: 1,
      maximum: 10_000_000,
      description: "Messages a second this source may send to each ingest replica (a batch counts each of its messages).",
    }),
    burst: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100_000_000,
        description: "Messages it may send at once after a quiet spell; default: one second's worth (messagesPerSecond).",
      }),
    ),
  },
  {
    additionalProperties: false,
    description: "Limits this source's messages per ingest replica; beyond it, requests are answered 429 with Retry-After (SDKs retry them).",
  },
);

export const SourceSpec = Type.Object(
  {
    writeKeySecretRef: SecretKeySelector("the source's write key"),
    additionalWriteKeySecretRefs: Type.Optional(
      Type.Array(SecretKeySelector("another write key of the source"), {
        maxItems: 4,
        description:
          "Other write keys accepted for this source, such as the old key while apps move to a new one. A key whose Secret cannot be read is skipped (the Ready message says so); requests with each are counted by trackhook_ingest_additional_key_requests_total.",
      }),
    ),
    enabled: Type.Optional(
      Type.Boolean({ default: true, description: "When false, the write key is refused as if unknown (401)." }),
    ),
    displayName: Type.Optional(Type.String({ maxLength: 256, description: "Human-readable name, for people and tools that read the resource; trackhook itself does not use it." })),
    rateLimit: Type.Optional(SourceRateLimit),
  },
  { additionalProperties: false, description: "A Segment-compatible source: SDKs authenticate with its write key." },
);
export type SourceSpec = Static<typeof SourceSpec>;

const LabelSelector = Type.Object(
  {
    matchLabels: Type.Optional(
      Type.Record(Type.String({ maxLength: 317 }), Type.String({ maxLength: 63 }), {
        description: "Sources whose labels include all of these pairs are selected.",
        maxProperties: 32,
      }),
    ),
  },
  { additionalProperties: false, description: "Selects Sources of the same namespace by label." },
);

/** Why a reserved header is refused, in the CRD's CEL rule and in compile's problems alike. */
export const RESERVED_HEADER_REASON = "is set by trackhook itself (framing, signature or delivery id) and cannot be a custom header";

/**
 * Header names a destination cannot set: HTTP framing and connection headers (a wrong
 * Content-Length or an Expect would fail every request, and be retried for hours), Host, and the
 * headers delivery sets itself. User-Agent may be replaced; a Content-Type is accepted but the
 * body always goes as application/json (as before this list existed).
 */
export const RESERVED_WEBHOOK_HEADERS: readonly string[] = [
  "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "expect", "te", "trailer",
  "proxy-connection", "proxy-authorization", "content-encoding", "x-signature", "x-delivery-id", "webhook-id", "webhook-timestamp", "webhook-signature",
];

/**
 * What HTTP lets a header value hold (RFC 9110: tab, space, visible ASCII and obs-text), the check
 * undici makes before sending: a value outside it fails every request without one being sent.
 * Valid as a JavaScript and as an RE2 (CEL) regular expression.
 */
export const HEADER_VALUE = "^[\\t\\x20-\\x7e\\x80-\\xff]*$";
/** Why a header value is refused, in the CRD's CEL rule and in compile's problems alike. */
export const HEADER_VALUE_REASON = "may hold only tabs, spaces, visible ASCII and Latin-1 characters (HTTP allows no others in a header)";

const WebhookHeader = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 256, pattern: HEADER_NAME, description: "HTTP header name." }),
    value: Type.Optional(Type.String({ maxLength: 4096, description: "Literal header value." })),
    valueFrom: Type.Optional(
      Type.Object(
        { secretKeyRef: SecretKeySelector("the header value") },
        { additionalProperties: false, description: "Takes the header value from a Secret (for tokens)." },
      ),
    ),
  },
  {
    additionalProperties: false,
    description: "A custom header sent with every request; exactly one of value or valueFrom.",
    oneOf: [{ required: ["value"] }, { required: ["valueFrom"] }],
    "x-kubernetes-validations": [
      {
        rule: `!(self.name.lowerAscii() in [${RESERVED_WEBHOOK_HEADERS.map((h) => `'${h}'`).join(", ")}])`,
        message: `this header ${RESERVED_HEADER_REASON}`,
      },
      { rule: `!has(self.value) || self.value.matches(r'${HEADER_VALUE}')`, message: `the value ${HEADER_VALUE_REASON}`, fieldPath: ".value" },
    ],
  },
);

/** Why a URL with no host or an impossible port is refused, in the CRD's CEL rule and in compile's problems alike. */
export const URL_HOST_REASON = "needs a host, and a port (if given) from 1 to 65535";
/** Why the same URL twice is refused: the receiver would get every message twice. */
export const URL_DUPLICATE_REASON = "is listed twice: the receiver would get every message twice";

/** Bounds of a duration field, as Go durations: the CRD's CEL rule and compile's check share them. */
export interface DurationBounds {
  min: string;
  max: string;
}

/**
 * spec.timeout. The spec's receivers answer within 5 s (the default). Under a second, a TLS
 * handshake and ordinary latency would fail as timeouts; over 30 s, a delivery pod shutting down
 * could not finish its requests within the chart's 60 s grace period, and a crashed worker's
 * messages would wait longer to be redelivered (ack_wait is timeout + 30 s).
 */
export const TIMEOUT_BOUNDS: DurationBounds = { min: "1s", max: "30s" };

/**
 * spec.retryWindow. The spec retries for up to four hours (the default). Seconds are allowed so
 * that trials and tests dead-letter quickly. A week covers a receiver down over a long weekend;
 * past that a person has to look, and dead letters (kept 14 days) with `trackhook replay` are the
 * tool. The events stream must keep messages longer than the window (`--stream-max-age`, 72h by
 * default, is raised for windows of days).
 */
export const RETRY_WINDOW_BOUNDS: DurationBounds = { min: "1s", max: "168h" };

/** Why a duration is refused, in the CRD's CEL rule and in compile's problems alike. */
export const durationBoundsReason = ({ min, max }: DurationBounds): string => `must be from ${min} to ${max}`;

/**
 * Kubernetes' CEL duration() reads Go durations, of which DURATION_PATTERN is a subset. Text that
 * is no duration is the pattern's to refuse: duration() of it would add a second, baffling error
 * ("type conversion error from 'string' to 'google.protobuf.Duration'").
 */
const durationRule = (bounds: DurationBounds) => ({
  rule: `!self.matches(r'${DURATION_PATTERN}') || (duration(self) >= duration('${bounds.min}') && duration(self) <= duration('${bounds.max}'))`,
  message: durationBoundsReason(bounds),
});

/** Why additionalSharedSecretRefs is refused without standardWebhooks, in the CRD and in compile alike. */
export const ADDITIONAL_SECRETS_REASON =
  "needs standardWebhooks: true: only webhook-signature carries several signatures (X-Signature carries one, made with sharedSecretRef)";
const ADDITIONAL_SECRETS_RULE =
  "!has(self.additionalSharedSecretRefs) || size(self.additionalSharedSecretRefs) == 0 || (has(self.standardWebhooks) && self.standardWebhooks)";

export const WebhookDestinationSpec = Type.Object(
  {
    sources: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 63, pattern: DNS_LABEL }), {
        minItems: 1,
        maxItems: 256,
        description: "Names of the Sources (same namespace) whose messages this destination receives. A source removed from the list takes its messages not yet delivered with it (not sent); its delete notifications among them are moved to the dead-letter queue (reason source_removed).",
      }),
    ),
    sourceSelector: Type.Optional(LabelSelector),
    urls: Type.Array(
      Type.String({
        minLength: 8,
        maxLength: 2048,
        // No user:password@ part: credentials go in headers (valueFrom a Secret), not in URLs
        // that end up in logs and attempt records.
        pattern: "^https?://[^\\s/?#@]+([/?#][^\\s]*)?$",
        description: "An http or https URL that receives POSTed messages (no credentials in it: use headers).",
      }),
      {
        minItems: 1,
        maxItems: 5,
        description: "1 to 5 webhook URLs, tried in parallel; one 2xx answer delivers the message.",
        "x-kubernetes-validations": [
          {
            rule: "self.all(u, isURL(u) && url(u).getScheme() in ['http', 'https'])",
            message: "every URL must be an http or https URL",
          },
          {
            // isURL accepts "http://:8080/" and any number as a port; undici can send to neither.
            // The size check first: int() of a longer number fails with a conversion error instead.
            rule: "self.all(u, !isURL(u) || (url(u).getHostname() != '' && (url(u).getPort() == '' || (url(u).getPort().size() <= 5 && int(url(u).getPort()) >= 1 && int(url(u).getPort()) <= 65535))))",
            message: `every URL ${URL_HOST_REASON}`,
          },
          // Said in words: the pattern alone refuses it with a regex (found by a GitOps review).
          { rule: "self.all(u, !u.matches(r'^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*@'))", message: "a URL carries no credentials (user:password@): send them in headers, valueFrom a Secret" },
          { rule: "self.all(u, self.filter(x, x == u).size() == 1)", message: `a URL ${URL_DUPLICATE_REASON}` },
        ],
      },
    ),
    headers: Type.Optional(
      Type.Array(WebhookHeader, { maxItems: 32, description: "Custom headers sent with every request." }),
    ),
    sharedSecretRef: Type.Optional(SecretKeySelector("the shared secret that signs requests (X-Signature)")),
    additionalSharedSecretRefs: Type.Optional(
      Type.Array(SecretKeySelector("another secret that signs webhook-signature"), {
        maxItems: 4,
        description:
          "Other secrets that also sign webhook-signature (Standard Webhooks: one v1 signature each, after the main one), such as the old secret while receivers move to a new one. X-Signature is signed with sharedSecretRef only. Needs standardWebhooks.",
      }),
    ),
    enabled: Type.Optional(
      Type.Boolean({
        default: true,
        description:
          "When false, nothing is delivered, and what was not delivered yet (retries included) is dropped, except delete notifications and replayed dead letters, which are moved to the dead-letter queue (reason destination_disabled); enabled again, it receives from then on. To pause a failing receiver without losing anything, leave it enabled: failures are retried for the retry window, then dead-lettered for `trackhook replay`.",
      }),
    ),
    timeout: Type.Optional(
      Type.String({
        default: "5s",
        pattern: DURATION_PATTERN,
        maxLength: 32,
        description: `Time allowed for one whole request, e.g. 5s (from ${TIMEOUT_BOUNDS.min} to ${TIMEOUT_BOUNDS.max}).`,
        "x-kubernetes-validations": [durationRule(TIMEOUT_BOUNDS)],
      }),
    ),
    retryWindow: Type.Optional(
      Type.String({
        default: "4h",
        pattern: DURATION_PATTERN,
        maxLength: 32,
        description: `How long a message is retried, from the time it was stored, e.g. 4h (from ${RETRY_WINDOW_BOUNDS.min} to ${RETRY_WINDOW_BOUNDS.max}).`,
        "x-kubernetes-validations": [durationRule(RETRY_WINDOW_BOUNDS)],
      }),
    ),
    maxInFlight: Type.Optional(
      Type.Integer({ default: 100, minimum: 1, maximum: 10_000, description: "Most messages in delivery at once for this destination." }),
    ),
    standardWebhooks: Type.Optional(
      Type.Boolean({ default: false, description: "Also send Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature)." }),
    ),
  },
  {
    additionalProperties: false,
    description: "Forwards every message of its sources to up to five webhook URLs.",
    oneOf: [{ required: ["sources"] }, { required: ["sourceSelector"] }],
    "x-kubernetes-validations": [
      {
        rule: "!has(self.standardWebhooks) || !self.standardWebhooks || has(self.sharedSecretRef)",
        message: "standardWebhooks needs sharedSecretRef: the secret is the signature's key",
        fieldPath: ".standardWebhooks",
      },
      {
        rule: ADDITIONAL_SECRETS_RULE,
        message: `additionalSharedSecretRefs ${ADDITIONAL_SECRETS_REASON}`,
        fieldPath: ".additionalSharedSecretRefs",
      },
    ],
  },
);
export type WebhookDestinationSpec = Static<typeof WebhookDestinationSpec>;

/** A label's key: an optional DNS-subdomain prefix and `/`, then a name (Kubernetes' rule). */
const LABEL_KEY = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
const LABEL_VALUE = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

/**
 * The fields of a Kubernetes ObjectMeta: a file may hold them all (`kubectl get -o yaml` writes
 * uid, resourceVersion, managedFields, ...), and no other, as the API server refuses an unknown
 * field (found by a review: `labels:` indented one level too far up was taken silently, the
 * destination selecting by it got no Source).
 */
function objectMeta<N extends TSchema>(name: N) {
  const given = Type.Optional(Type.Unknown());
  return Type.Object(
    {
      name,
      namespace: Type.Optional(Type.String({ minLength: 1, maxLength: 63, pattern: DNS_LABEL })),
      labels: Type.Optional(
        Type.Record(
          Type.String({ pattern: LABEL_KEY }),
          Type.String({ maxLength: 63, pattern: LABEL_VALUE, description: "a label value is empty or up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit" }),
        ),
      ),
      annotations: Type.Optional(Type.Record(Type.String(), Type.String())),
      /** Set by Kubernetes; in a --config file they may be given, or left out. */
      creationTimestamp: Type.Optional(Type.String({ format: "date-time" })),
      generation: Type.Optional(Type.Integer({ minimum: 1 })),
      generateName: given,
      uid: given,
      resourceVersion: given,
      selfLink: given,
      deletionTimestamp: given,
      deletionGracePeriodSeconds: given,
      ownerReferences: given,
      finalizers: given,
      managedFields: given,
    },
    { additionalProperties: false },
  );
}

const Metadata = objectMeta(Type.String({ minLength: 1, maxLength: 63, pattern: DNS_LABEL }));

/** What a resource's file may hold beside its spec: `status` too, as `kubectl get -o yaml` writes it. */
function document<K extends string, S extends TSchema>(kind: K, apiVersion: string, spec: S) {
  return Type.Object(
    { apiVersion: Type.Literal(apiVersion), kind: Type.Literal(kind), metadata: Metadata, spec, status: Type.Optional(Type.Unknown()) },
    { additionalProperties: false },
  );
}

/**
 * A user id as a deletion names it: no control characters, no whitespace at either end (a stray
 * space or newline would notify a user who does not exist, and the request would still succeed).
 * Unicode classes only: the API server's regular expressions (Go's) read `\s` as ASCII
 * whitespace, Node's as Unicode's, so a trailing no-break space passed one and not the other.
 */
export const USER_ID_PATTERN = "^[^\\p{Z}\\p{Cc}]([^\\p{Cc}]*[^\\p{Z}\\p{Cc}])?$";

export const DeletionRequestSpec = Type.Object(
  {
    userIds: Type.Array(Type.String({ minLength: 1, maxLength: 256, pattern: USER_ID_PATTERN }), {
      minItems: 1,
      maxItems: 5000,
      description: "The users to delete: one delete notification per user goes to each affected source's webhooks.",
    }),
    sources: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 63, pattern: DNS_LABEL }), {
        minItems: 1,
        maxItems: 256,
        description: "Names of the Sources (same namespace) affected; default: every Source of the namespace.",
      }),
    ),
  },
  {
    additionalProperties: false,
    description: "A request to delete users' data: receivers get a delete notification to start their own automations.",
    // The notifications go out once, when the request is created: a changed spec could not be honoured.
    "x-kubernetes-validations": [{ rule: "self == oldSelf", message: "a DeletionRequest cannot be changed; create a new one" }],
  },
);
export type DeletionRequestSpec = Static<typeof DeletionRequestSpec>;

export const SourceDocument = document("Source", API_VERSION, SourceSpec);
export type SourceDocument = Static<typeof SourceDocument>;
export const WebhookDestinationDocument = document("WebhookDestination", API_VERSION, WebhookDestinationSpec);
export type WebhookDestinationDocument = Static<typeof WebhookDestinationDocument>;
export const DeletionRequestDocument = document("DeletionRequest", API_VERSION, DeletionRequestSpec);
export type DeletionRequestDocument = Static<typeof DeletionRequestDocument>;

/**
 * Base64 as the API server reads a Secret's `data` (Go's standard encoding: padded, line breaks
 * ignored). Node's decoder takes anything, skipping what is not base64: plain text under `data`
 * became a garbage write key or signing secret in files, where kubectl refuses it (found by a
 * review).
 */
const B64 = "[A-Za-z0-9+/][\\r\\n]*";
const BASE64 = `^[\\r\\n]*(?:(?:${B64}){4})*(?:(?:${B64}){2}=[\\r\\n]*=|(?:${B64}){3}=)?[\\r\\n]*$`;

export const SecretDocument = Type.Object(
  {
    apiVersion: Type.Literal("v1"),
    kind: Type.Literal("Secret"),
    metadata: objectMeta(Type.String({ minLength: 1, maxLength: 253, pattern: DNS_SUBDOMAIN })),
    type: Type.Optional(Type.String()),
    immutable: Type.Optional(Type.Boolean()),
    data: Type.Optional(
      Type.Record(
        Type.String({ pattern: SECRET_KEY }),
        Type.String({ pattern: BASE64, description: "a value under data is base64, as kubectl requires; put plain text under stringData" }),
      ),
    ),
    stringData: Type.Optional(Type.Record(Type.String({ pattern: SECRET_KEY }), Type.String())),
  },
  { additionalProperties: false },
);
export type SecretDocument = Static<typeof SecretDocument>;

/** A metav1.Condition: the standard shape kubectl wait, Helm --wait and kstatus understand. */
export const Condition = Type.Object({
  type: Type.String({ maxLength: 316, description: "Condition type, e.g. Ready." }),
  status: Type.Unsafe<"True" | "False" | "Unknown">({
    type: "string",
    enum: ["True", "False", "Unknown"],
    description: "True, False or Unknown.",
  }),
  observedGeneration: Type.Optional(Type.Integer({ description: "Generation this condition was set for." })),
  lastTransitionTime: Type.String({ format: "date-time", description: "When the status last changed." }),
  reason: Type.String({ minLength: 1, maxLength: 1024, pattern: "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", description: "CamelCase reason for the condition's last transition." }),
  message: Type.String({ maxLength: 32768, description: "Human-readable details." }),
});
export type Condition = Static<typeof Condition>;

// A map keyed by type, as metav1.Condition lists are: server-side apply merges them by type.
const conditions = (description: string) =>
  Type.Optional(Type.Array(Condition, { maxItems: 8, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], description }));
const commonStatus = {
  observedGeneration: Type.Optional(Type.Integer({ description: "The generation the conditions describe." })),
  conditions: conditions("Standard conditions; Ready tells whether the object is in effect."),
};
const statusDescription = "Observed state, written by the operator.";

export const SourceStatus = Type.Object(
  {
    ...commonStatus,
    writeKeyHeldElsewhere: Type.Optional(
      Type.Object(
        {
          secretName: Type.String({ description: "The Secret that held the refused key." }),
          secretKey: Type.String({ description: "Its key." }),
          secretResourceVersion: Type.String({ description: "The Secret's version then." }),
        },
        {
          additionalProperties: false,
          description:
            "Set while the write key is refused because a Source in another namespace holds it. While the Secret stays as it was, this Source does not take the key over once it is free (that namespace's apps may still send with it): change the Secret or re-create the Source to claim it.",
        },
      ),
    ),
  },
  { description: statusDescription },
);
export type SourceStatus = Static<typeof SourceStatus>;

export const WebhookDestinationStatus = Type.Object(
  {
    ...commonStatus,
    conditions: conditions(
      "Standard conditions; Ready tells whether the destination is in effect, Delivering whether what it is sent gets delivered (NoProgress: messages wait and none was delivered for the operator's --delivery-health-window; DeadLettering: some were dead-lettered).",
    ),
    urlCount: Type.Optional(Type.Integer({ description: "Number of webhook URLs." })),
    inEffectSince: Type.Optional(
      Type.String({
        format: "date-time",
        description:
          "When the destination's config first took effect (enabled or disabled). A destination not yet in effect (its Secret still missing, say) receives, once it is, what was stored from its creation on; one in effect that is enabled again receives from then.",
      }),
    ),
    deliveringSince: Type.Optional(
      Type.String({
        format: "date-time",
        description:
          "Since when the destination has been enabled without a break. Its consumer made again meanwhile (a NATS store lost, a move to another NATS) starts at the events stream's beginning when the stream is younger than this, so nothing stored since is skipped.",
      }),
    ),
    sources: Type.Optional(
      Type.Array(Type.String({ maxLength: 63 }), { maxItems: 256, description: "The Sources whose messages are delivered (selector resolved)." }),
    ),
  },
  { description: statusDescription },
);
export type WebhookDestinationStatus = Static<typeof WebhookDestinationStatus>;

/** Segment's regulation states: a request is INITIALIZED, RUNNING, then FINISHED or FAILED. */
export const DELETION_STATES = ["INITIALIZED", "RUNNING", "FINISHED", "FAILED"] as const;
export type DeletionState = (typeof DELETION_STATES)[number];
const deletionState = (description: string) =>
  Type.Unsafe<DeletionState>({ type: "string", enum: [...DELETION_STATES], description });

export const DeletionRequestStatus = Type.Object(
  {
    ...commonStatus,
    state: Type.Optional(deletionState("INITIALIZED, RUNNING, FINISHED or FAILED.")),
    sources: Type.Optional(
      Type.Array(
        Type.Object({
          name: Type.String({ maxLength: 63, description: "The Source." }),
          state: deletionState("Progress of this source's notifications."),
          notified: Type.Integer({ minimum: 0, description: "Users whose delete notification is stored for delivery." }),
          destinations: Type.Optional(
            Type.Array(Type.String({ maxLength: 63 }), {
              maxItems: 256,
              description: "The enabled WebhookDestinations (of this namespace) that this source's notifications go to, as decided before any was stored.",
            }),
          ),
          reason: Type.Optional(Type.String({ maxLength: 1024, description: "Why the source failed or was skipped, CamelCase." })),
          message: Type.Optional(Type.String({ maxLength: 4096, description: "Details for humans." })),
        }),
        { maxItems: 256, description: "Progress per affected source." },
      ),
    ),
    startedAt: Type.Optional(Type.String({ format: "date-time", description: "When the operator started sending." })),
    completedAt: Type.Optional(Type.String({ format: "date-time", description: "When the request reached FINISHED or FAILED." })),
    deadLettersRemoved: Type.Optional(
      Type.Integer({ minimum: 0, description: "Dead letters of these users removed from trackhook, so that a replay cannot send them to the receivers again." }),
    ),
    finalPurgeAt: Type.Optional(
      Type.String({
        format: "date-time",
        description: "When the users' dead letters are looked for once more: by then every message of theirs that was still being retried at the request has been delivered or dead-lettered (90% of the events stream's max_age after completedAt).",
      }),
    ),
    finalPurgeDone: Type.Optional(Type.Boolean({ description: "The last look for the users' dead letters is done." })),
    notifiedOnStream: Type.Optional(
      Type.String({
        maxLength: 64,
        description: "The creation time of the events stream the delete notifications were last stored on: if the stream there is now was made since (a NATS store lost) before finalPurgeAt, they are stored again.",
      }),
    ),
  },
  { description: statusDescription },
);
export type DeletionRequestStatus = Static<typeof DeletionRequestStatus>;
