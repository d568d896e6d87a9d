// Builds the CustomResourceDefinitions from the resource schemas. crds/*.yaml is this output;
// scripts/generate.ts writes it and test/schema/generated.test.ts fails when it is stale.
import type { TSchema } from "@sinclair/typebox";
import {
  DNS_LABEL,
  DeletionRequestSpec,
  DeletionRequestStatus,
  GROUP,
  SourceSpec,
  SourceStatus,
  VERSION,
  WebhookDestinationSpec,
  WebhookDestinationStatus,
} from "./resources.ts";

interface KindInfo {
  kind: string;
  plural: string;
  shortNames: string[];
  spec: TSchema;
  status: TSchema;
  description: string;
  columns: Array<{ name: string; type: string; jsonPath: string; description?: string; priority?: number }>;
}

const readyColumns = [
  { name: "Ready", type: "string", jsonPath: `.status.conditions[?(@.type=="Ready")].status` },
  { name: "Reason", type: "string", jsonPath: `.status.conditions[?(@.type=="Ready")].reason` },
];
/** Last: the Ready message (the why of a False) in `-o wide`, then the age. */
const closingColumns = [
  { name: "Message", type: "string", jsonPath: `.status.conditions[?(@.type=="Ready")].message`, priority: 1 },
  { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
];

export const KINDS: KindInfo[] = [
  {
    kind: "Source",
    plural: "sources",
    shortNames: ["src", "thsrc"],
    spec: SourceSpec,
    status: SourceStatus,
    description: "A Segment-compatible source whose SDKs send to trackhook with its write key.",
    columns: [
      ...readyColumns,
      { name: "Enabled", type: "boolean", jsonPath: ".spec.enabled" },
      { name: "Rate-Limit", type: "integer", jsonPath: ".spec.rateLimit.messagesPerSecond", priority: 1, description: "Messages a second per ingest replica" },
      ...closingColumns,
    ],
  },
  {
    kind: "WebhookDestination",
    plural: "webhookdestinations",
    shortNames: ["whd", "webhook"],
    spec: WebhookDestinationSpec,
    status: WebhookDestinationStatus,
    description: "Forwards the messages of its sources to up to five webhook URLs, signed and retried.",
    columns: [
      ...readyColumns,
      { name: "Delivery", type: "string", jsonPath: `.status.conditions[?(@.type=="Delivering")].reason`, description: "Delivering, NoProgress or DeadLettering (the Delivering condition)" },
      { name: "URLs", type: "integer", jsonPath: ".status.urlCount" },
      { name: "Sources", type: "string", jsonPath: ".status.sources", priority: 1 },
      ...closingColumns,
    ],
  },
  {
    kind: "DeletionRequest",
    plural: "deletionrequests",
    shortNames: ["delreq"],
    spec: DeletionRequestSpec,
    status: DeletionRequestStatus,
    description: "Deletes users: one delete notification per user to the webhooks of each affected source, sent once.",
    columns: [
      { name: "State", type: "string", jsonPath: ".status.state" },
      ...readyColumns,
      // No Sources column: a printer column shows only the first of a list of objects
      // (.status.sources[*].name printed one source of ten); the Message column names them all.
      ...closingColumns,
    ],
  },
];

/**
 * Converts JSON Schema as TypeBox emits it into a Kubernetes structural schema: maps become
 * additionalProperties, closed objects lose `additionalProperties: false` (the API server prunes
 * unknown fields instead), and keywords Kubernetes rejects are dropped.
 */
function toStructural(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(toStructural);
  if (schema === null || typeof schema !== "object") return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === "additionalProperties" && value === false) continue;
    if (key === "$id" || key === "contentEncoding") continue;
    if (key === "format" && value !== "date-time") continue;
    if (key === "oneOf" && exactlyOneOf(value)) {
      // OpenAPI's oneOf error ("must validate one and only one schema") names no field; CEL can.
      const [a, b] = exactlyOneOf(value)!;
      const rules = (out["x-kubernetes-validations"] as unknown[] | undefined) ?? [];
      rules.unshift({ rule: `has(self.${a}) != has(self.${b})`, message: `exactly one of ${a} or ${b} must be set` });
      out["x-kubernetes-validations"] = rules;
      continue;
    }
    if (key === "x-kubernetes-validations" && Array.isArray(out[key])) {
      out[key] = [...(out[key] as unknown[]), ...(value as unknown[])];
      continue;
    }
    if (key === "patternProperties") {
      const [only] = Object.values(value as Record<string, unknown>);
      out.additionalProperties = toStructural(only);
      continue;
    }
    out[key] = toStructural(value);
  }
  return out;
}

/** `oneOf: [{required: [a]}, {required: [b]}]` → [a, b]. */
function exactlyOneOf(value: unknown): [string, string] | undefined {
  if (!Array.isArray(value) || value.length !== 2) return undefined;
  const names = value.map((branch: { required?: unknown }) =>
    Object.keys(branch).length === 1 && Array.isArray(branch.required) && branch.required.length === 1 ? String(branch.required[0]) : undefined,
  );
  return names[0] && names[1] ? [names[0], names[1]] : undefined;
}

export function buildCrd(info: KindInfo): Record<string, unknown> {
  const status = toStructural(info.status);
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: {
      name: `${info.plural}.${GROUP}`,
      labels: { "app.kubernetes.io/name": "trackhook", "app.kubernetes.io/part-of": "trackhook" },
    },
    spec: {
      group: GROUP,
      names: {
        kind: info.kind,
        listKind: `${info.kind}List`,
        plural: info.plural,
        singular: info.kind.toLowerCase(),
        shortNames: info.shortNames,
        categories: ["trackhook"],
      },
      scope: "Namespaced",
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: info.columns,
          schema: {
            openAPIV3Schema: {
              type: "object",
              description: info.description,
              required: ["spec"],
              properties: {
                apiVersion: { type: "string", description: "APIVersion defines the versioned schema of this representation of an object." },
                kind: { type: "string", description: "Kind is a string value representing the REST resource this object represents." },
                metadata: {
                  type: "object",
                  properties: { name: { type: "string", maxLength: 63, pattern: DNS_LABEL } },
                },
                spec: toStructural(info.spec),
                status,
              },
            },
          },
        },
      ],
    },
  };
}
