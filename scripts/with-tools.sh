#!/usr/bin/env bash
# Runs a command with .tools/bin (Node 24, nats-server, ...) first on PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
export PATH="$here/.tools/bin:$here/node_modules/.bin:$PATH"
exec "$@"
