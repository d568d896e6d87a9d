// Builds the CustomResourceDefinitions from the resource schemas. crds/*.yaml is this output;
// scripts/generate.ts writes it and test/schema/generated.test.ts fails when it is stale.
import type { TSchema } from "@sinclair/typebox";
import { GROUP, VERSION, ResourceStatus, SourceSpec, WebhookDestinationSpec } from "./resources.ts";

interface KindInfo {
  kind: string;
  plural: string;
  shortNames: string[];
  spec: TSchema;
  description: string;
  columns: Array<{ name: string; type: string; jsonPath: string; description?: string }>;
}

const readyColumns = [
  { name: "Ready", type: "string", jsonPath: `.status.conditions[?(@.type=="Ready")].status` },
  { name: "Reason", type: "string", jsonPath: `.status.conditions[?(@.type=="Ready")].reason` },
];
const ageColumn = { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" };

export const KINDS: KindInfo[] = [
  {
    kind: "Source",
    plural: "sources",
    shortNames: ["src", "thsrc"],
    spec: SourceSpec,
    description: "A Segment-compatible source whose SDKs send to trackhook with its write key.",
    columns: [
      ...readyColumns,
      { name: "Enabled", type: "boolean", jsonPath: ".spec.enabled" },
      ageColumn,
    ],
  },
  {
    kind: "WebhookDestination",
    plural: "webhookdestinations",
    shortNames: ["whd", "webhook"],
    spec: WebhookDestinationSpec,
    description: "Forwards the messages of its sources to up to five webhook URLs, signed and retried.",
    columns: [
      ...readyColumns,
      { name: "Sources", type: "string", jsonPath: ".spec.sources", priority: 1 } as KindInfo["columns"][number],
      { name: "URLs", type: "integer", jsonPath: ".status.urlCount" },
      ageColumn,
    ],
  },
];

/**
 * Converts JSON Schema as TypeBox emits it into a Kubernetes structural schema: maps become
 * additionalProperties, closed objects lose `additionalProperties: false` (the API server prunes
 * unknown fields instead), and keywords Kubernetes rejects are dropped.
 */
export function toStructural(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(toStructural);
  if (schema === null || typeof schema !== "object") return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === "additionalProperties" && value === false) continue;
    if (key === "$id" || key === "contentEncoding") continue;
    if (key === "format" && value !== "date-time") continue;
    if (key === "patternProperties") {
      const [only] = Object.values(value as Record<string, unknown>);
      out.additionalProperties = toStructural(only);
      continue;
    }
    out[key] = toStructural(value);
  }
  return out;
}

export function buildCrd(info: KindInfo): Record<string, unknown> {
  const status = toStructural(ResourceStatus) as Record<string, unknown>;
  if (info.kind === "WebhookDestination") {
    (status.properties as Record<string, unknown>).urlCount = { type: "integer", description: "Number of webhook URLs." };
  }
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
                  properties: { name: { type: "string", maxLength: 63, pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" } },
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
