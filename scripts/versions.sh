# Pinned tool versions, read by scripts/tools.sh. Bump here and nowhere else.
NODE_VERSION=24.21.0
NATS_SERVER_VERSION=2.14.9
