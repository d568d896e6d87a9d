// Webhook delivery (issue 3, in progress): the pure rules and the SSRF guard. The consumer loop,
// the undici sender, dead letters and the admin commands build on these.
export { routesTo } from "./routing.ts";
export { webhookBody, xSignature, standardWebhookHeaders, type DeliverableMessage } from "./payload.ts";
export { classifyStatus, parseRetryAfter, combine, backoffMs, RETRY_AFTER_BOUNDS_MS, type AttemptOutcome, type DeliveryErrorCode } from "./outcome.ts";
export { isForbiddenAddress, guardedLookup, checkUrlHost, PrivateAddressError } from "./ssrf.ts";
