#!/usr/bin/env bash
# Builds the Segment Go SDK driver (test/sdk/go, analytics-go pinned in its go.mod) into the
# git-ignored .tools/bin/trackhook-sdk-go-driver, for test/ingest/sdk-go.test.ts.
# Idempotent: skipped while the binary is newer than every file of the module.
set -euo pipefail
cd "$(dirname "$0")/.."

src="$PWD/test/sdk/go"
bin="$PWD/.tools/bin"
out="$bin/trackhook-sdk-go-driver"

if [ -x "$out" ] && [ -z "$(find "$src" -type f -newer "$out" -print -quit)" ]; then
  exit 0
fi
command -v go >/dev/null || {
  echo "tools: Go >= 1.22 is needed to build the analytics-go driver in test/sdk/go (for test/ingest/sdk-go.test.ts); install Go or put it on PATH" >&2
  exit 1
}

echo "tools: building trackhook-sdk-go-driver (github.com/segmentio/analytics-go/v3, see test/sdk/go/go.mod)" >&2
mkdir -p "$bin"
# Built beside the target and moved into place: a test never runs a half-written binary, and the
# new file's time is always after the sources' (go build leaves an up-to-date -o file untouched).
tmp=$(mktemp "$bin/.trackhook-sdk-go-driver.XXXXXX")
trap 'rm -f "$tmp"' EXIT
(cd "$src" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags "-s -w" -o "$tmp" .)
chmod 755 "$tmp"
mv -f "$tmp" "$out"
