# syntax=docker/dockerfile:1
# The one trackhook image: `trackhook <command>` (ingest, deliver, operator, admin commands).
#   docker build -t trackhook:$(git rev-parse --short HEAD) .
#   docker run --rm trackhook:<tag> ingest --help
# Runs as uid/gid 1000 (non-root), writes nothing to its root filesystem (run it read-only), and
# has tini as PID 1 so signals reach Node and the graceful shutdowns (drain NATS, finish
# deliveries) run. Node's version matches scripts/versions.sh.
ARG NODE_VERSION=24.21.0

# Compile TypeScript to dist/ (the same as `npm run build`).
FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY cli ./cli
COPY dataplane ./dataplane
COPY operator ./operator
COPY schema ./schema
COPY scripts/copy-analytics-js.ts ./scripts/
# The same as `npm run build`: analytics.js (a dev dependency's browser bundle) copied into dist/.
RUN npx tsc -p tsconfig.build.json && chmod +x dist/cli/main.js && node scripts/copy-analytics-js.ts

# Production dependencies only.
FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

FROM node:${NODE_VERSION}-bookworm-slim
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="trackhook" \
      org.opencontainers.image.description="Self-hosted, Segment-compatible Tracking API with signed webhook delivery" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# tini as init; npm and corepack are not needed at run time (less to patch).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && rm -rf /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/corepack \
           /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack
ENV NODE_ENV=production
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json LICENSE NOTICE ./
# The image's "node" user, by number so Kubernetes' runAsNonRoot can verify it.
USER 1000:1000
# ingest, deliver and operator (health, readiness and metrics) ports.
EXPOSE 8080 8081 8082
ENTRYPOINT ["/usr/bin/tini", "--", "node", "--max-semi-space-size=16", "--no-allocation-site-pretenuring", "--heap-growing-percent=50", "dist/cli/main.js"]
CMD ["--help"]
