// Health, readiness and metrics endpoints: a Fastify of their own for delivery and the operator,
// routes on the ingest's own server.
export { OPS_PATHS, buildOpsServer, opsRoutes, type OpsServerOptions } from "./server.ts";
