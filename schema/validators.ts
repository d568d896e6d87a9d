// ajv validators compiled from the schemas, once, at module load.
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import type { Static, TSchema } from "@sinclair/typebox";
import { BatchBody, MESSAGE_SCHEMAS, type MessageType } from "./messages.ts";
import { DeletionRequestDocument, SecretDocument, SourceDocument, WebhookDestinationDocument } from "./resources.ts";
import { CompiledConfig, CompiledDestination, CompiledSource } from "./compiled-config.ts";
import { DURATION_PATTERN } from "./duration.ts";

function newAjv(options: { useDefaults: boolean }): Ajv {
  const ajv = new Ajv({ allErrors: true, verbose: true, strict: true, strictRequired: false, useDefaults: options.useDefaults, formats: { "date-time": true } });
  // CEL rules are for the API server; the equivalent checks here are plain JSON Schema.
  ajv.addKeyword({ keyword: "x-kubernetes-validations", schemaType: "array" });
  return ajv;
}

const forMessages = newAjv({ useDefaults: false });
const forDocuments = newAjv({ useDefaults: true });

const compile = <T extends TSchema>(ajv: Ajv, schema: T) => ajv.compile<Static<T>>(schema);

export const validateMessage = Object.fromEntries(
  Object.entries(MESSAGE_SCHEMAS).map(([type, schema]) => [type, compile(forMessages, schema)]),
) as { [K in MessageType]: ValidateFunction };
export const validateBatchBody = compile(forMessages, BatchBody);

/** Documents get their schema defaults filled in (enabled: true, timeout: 5s, ...). */
export const validateSourceDocument = compile(forDocuments, SourceDocument);
export const validateWebhookDestinationDocument = compile(forDocuments, WebhookDestinationDocument);
export const validateSecretDocument = compile(forDocuments, SecretDocument);
export const validateDeletionRequestDocument = compile(forDocuments, DeletionRequestDocument);
export const validateCompiledConfig = compile(forDocuments, CompiledConfig);
export const validateCompiledSource = compile(forMessages, CompiledSource);
export const validateCompiledDestination = compile(forMessages, CompiledDestination);

/** `spec.urls[2]: must match pattern ...` — a field path a YAML author recognises. */
export function describeErrors(errors: ErrorObject[] | null | undefined): string[] {
  return (errors ?? [])
    .filter((e) => e.keyword !== "if")
    .map((e) => {
      const path = e.instancePath
        .split("/")
        .slice(1)
        .map((seg) => (/^\d+$/.test(seg) ? `[${seg}]` : `.${seg}`))
        .join("")
        .replace(/^\./, "");
      const field = e.keyword === "required" ? [path, e.params.missingProperty].filter(Boolean).join(".") : path;
      // A pattern means nothing to a person reading the error; the field's description does.
      const about = (e.parentSchema as { description?: string } | undefined)?.description;
      const detail =
        e.keyword === "required" ? "is required"
        : e.keyword === "additionalProperties" ? `has unknown field "${e.params.additionalProperty}"`
        : e.keyword === "pattern" && e.params.pattern === DURATION_PATTERN ? `"${String(e.data)}" is not a duration (a number and a unit: ms, s, m, h; e.g. 4h, 90m, 1h30m)`
        : e.keyword === "pattern" && about ? `is not valid: ${about}`
        : e.keyword === "type" && about ? `${e.message} (${about})${yamlHint(e)}`
        : `${e.message}${yamlHint(e)}`;
      return `${field || "(document)"}: ${detail}`;
    });
}

/**
 * A string expected and a boolean or number found: YAML read an unquoted value so (YAML 1.1, as
 * kubectl reads it: `on`, `yes`, `n` are booleans; `010` a number), which a person rarely sees.
 */
function yamlHint(e: ErrorObject): string {
  const found = typeof e.data;
  return e.keyword === "type" && e.params.type === "string" && (found === "boolean" || found === "number")
    ? `; YAML read it as a ${found} (in YAML 1.1, as kubectl reads it, yes, no, on, off, y and n are booleans): quote it`
    : "";
}
