// What the routes share: options, the live source directory, the publisher, metrics.
import type { Registry } from "prom-client";
import type { IngestMetrics } from "./metrics.ts";
import type { IngestOptions } from "./options.ts";
import type { EventPublisher } from "./publish.ts";
import type { SourceDirectory } from "./auth.ts";
import type { SourceRateLimits } from "./rate-limit.ts";
import type { BodyBudget } from "./body-budget.ts";
import type { KeyedLogInterval } from "../telemetry/mod.ts";
import type { IngestActivity } from "./app.ts";

export interface IngestState {
  readonly options: IngestOptions;
  readonly metrics: IngestMetrics;
  /** What /metrics serves: the ingest's registry, merged with others when one process runs more. */
  readonly registry: Registry;
  readonly publisher: EventPublisher;
  /** Replaced whenever the config changes. */
  directory: SourceDirectory;
  /** Request body bytes held at once, all requests together. */
  readonly bodies: BodyBudget;
  /** Sources' spec.rateLimit, counted in this process. */
  readonly rateLimits: SourceRateLimits;
  /**
   * Lines said per message or per refused request, let through once per 10 s per kind (a source
   * and a reason, an error code) with the count held back: write keys in browsers are public, and
   * one batch of 2,500 bad messages would otherwise be 2,500 lines.
   */
  readonly repeatedLines: KeyedLogInterval;
  readonly activity?: IngestActivity;
  /** Resolves true when JetStream answers. */
  ready(): Promise<{ ready: boolean; reason?: string }>;
}

declare module "fastify" {
  interface FastifyRequest {
    /** The error code the request was answered with, for metrics. */
    errorCode?: string;
  }
}
