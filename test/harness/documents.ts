// The YAML documents tests apply (kubectl) or load (--config): one builder per kind, so a test
// shows only what is particular to it.
export const secretYaml = (name: string, data: Record<string, string>) => `apiVersion: v1
kind: Secret
metadata: { name: ${name} }
stringData: ${JSON.stringify(data)}
`;

export const sourceYaml = (name: string, secret: { name: string; key?: string }) => `apiVersion: trackhook.io/v1alpha1
kind: Source
metadata: { name: ${name} }
spec: { writeKeySecretRef: { name: ${secret.name}, key: ${secret.key ?? "writeKey"} } }
`;

export const destinationYaml = (name: string, spec: { sources: string[]; urls: string[]; sharedSecret?: { name: string; key: string } }) => `apiVersion: trackhook.io/v1alpha1
kind: WebhookDestination
metadata: { name: ${name} }
spec:
  sources: ${JSON.stringify(spec.sources)}
  urls: ${JSON.stringify(spec.urls)}
${spec.sharedSecret ? `  sharedSecretRef: { name: ${spec.sharedSecret.name}, key: ${spec.sharedSecret.key} }\n` : ""}`;

/** Documents joined into one multi-document YAML stream. */
export const yamlDocuments = (...documents: string[]) => documents.join("---\n");
