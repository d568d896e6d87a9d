// Webhook delivery (issue 3, in progress): the pure rules and the SSRF guard. The consumer loop,
// the undici sender, dead letters and the admin commands build on these.
export { routesTo } from "./routing.ts";
export { webhookBody, xSignature, standardWebhookHeaders, type DeliverableMessage } from "./payload.ts";
export { classifyStatus, parseRetryAfter, combine, backoffMs, RETRY_AFTER_BOUNDS_MS, type AttemptOutcome, type DeliveryErrorCode } from "./outcome.ts";
export { isForbiddenAddress, guardedLookup, checkUrlHost, PrivateAddressError } from "./ssrf.ts";
export { WebhookSender, type SenderOptions, type SendRequest, type SendResult } from "./sender.ts";
export { DeliveryService, DEFAULT_PROCESS_MAX_IN_FLIGHT, type DeliveryServiceDeps } from "./service.ts";
export { ConcurrencyLimit } from "./limit.ts";
export { DestinationWorker, DELIVERY_ID_HEADER, type DestinationWorkerDeps, type AttemptRecord, type WebhookSending } from "./worker.ts";
export { DeliveryMetrics } from "./metrics.ts";
export { ensureDestinationConsumer, removeDestinationConsumers, destinationConsumerConfig, ackWaitMs } from "./consumers.ts";
