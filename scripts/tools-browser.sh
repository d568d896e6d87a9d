#!/usr/bin/env bash
# Installs Debian's chromium for test/ingest/sdk-browser.test.ts, which drives the official Segment
# browser SDK (analytics-next) in it. Idempotent: a no-op when chromium is already there. Needs
# apt-get and root (or sudo): scripts/apt-install.sh.
set -euo pipefail

# The test looks for $CHROMIUM, else /usr/bin/chromium.
chromium="${CHROMIUM:-/usr/bin/chromium}"
if [ -x "$chromium" ]; then exit 0; fi

cd "$(dirname "$0")/.."
bash scripts/apt-install.sh chromium
[ -x "$chromium" ] || { echo "tools: chromium installed, but $chromium is not there; set CHROMIUM to its path" >&2; exit 1; }
