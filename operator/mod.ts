// The Kubernetes operator: Source, WebhookDestination and DeletionRequest reconciled into the
// trackhook-config bucket, JetStream consumers and delete notifications.
export { Operator, operatorOptions, type OperatorOptions } from "./operator.ts";
export { OperatorMetrics } from "./metrics.ts";
export { kubeClients, loadKubeConfig, type Kube } from "./kube/client.ts";
export { CrdsOutdatedError, checkInstalledCrds } from "./kube/crd-check.ts";
export { FINALIZER } from "./reconcile/context.ts";
