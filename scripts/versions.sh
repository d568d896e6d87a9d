# Pinned tool versions, read by scripts/tools.sh. Bump here and nowhere else.
NODE_VERSION=24.21.0
NATS_SERVER_VERSION=2.14.9
# The newest release line: the NATS-facing tests run on it too (vitest.config.ts, "nats-next").
NATS_SERVER_NEXT_VERSION=2.15.2
# The control plane for operator tests and chart validation (built from the Go module proxy).
KUBERNETES_VERSION=1.35.4
ETCD_VERSION=3.6.16
HELM_VERSION=4.3.1
# Segment SDKs the compatibility tests run (test/ingest/sdk-*.test.ts); the Node SDK is in package.json.
SEGMENT_PYTHON_VERSION=2.4.0
