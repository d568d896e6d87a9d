// Webhook delivery: the pure rules, the SSRF guard, the undici sender, the consumers' workers and
// the service that runs them (the admin commands' operations are in ../admin/).
export { routesTo } from "./routing.ts";
export { webhookBody, xSignature, standardWebhookHeaders, type DeliverableMessage } from "./payload.ts";
export { classifyStatus, parseRetryAfter, combine, backoffMs, RETRY_AFTER_BOUNDS_MS, type AttemptOutcome, type DeliveryErrorCode } from "./outcome.ts";
export { isForbiddenAddress, guardLookup, checkUrlHost, urlReachesOnlyPrivate, PrivateAddressError } from "./ssrf.ts";
export { WebhookSender, type SenderOptions, type SendRequest, type SendResult } from "./sender.ts";
export { egressProxy, redactProxyUrl, InvalidEgressProxyError, type EgressProxy } from "./egress-proxy.ts";
export { DeliveryService, DEFAULT_PROCESS_MAX_IN_FLIGHT, type DeliveryServiceDeps } from "./service.ts";
export { DeliverySlots, SlotShare } from "./limit.ts";
export { DestinationWorker, DELIVERY_ID_HEADER, redactUrl, retryWindowInForceMs, type DestinationWorkerDeps, type AttemptRecord, type DeliveryActivity, type WebhookSending } from "./worker.ts";
export { DeliveryMetrics } from "./metrics.ts";
export { ensureDestinationConsumer, removeDestinationConsumers, destinationConsumerConfig, ackWaitMs, oldestWaitingAt, type ConsumerMade, type SourcesRemoved } from "./consumers.ts";
export { deadLetterUndelivered, type UndeliveredMoved } from "./undelivered.ts";
