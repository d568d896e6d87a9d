#!/usr/bin/env bash
# Installs Debian's chromium for test/ingest/sdk-browser.test.ts, which drives the official Segment
# browser SDK (analytics-next) in it. Idempotent: a no-op when chromium is already there. Needs
# apt-get and root (or sudo); refreshes the package lists only when the package cannot be installed
# from the ones present (a fresh machine has none, an old machine may name versions long gone).
set -euo pipefail

# The test looks for $CHROMIUM, else /usr/bin/chromium.
chromium="${CHROMIUM:-/usr/bin/chromium}"
if [ -x "$chromium" ]; then exit 0; fi

command -v apt-get >/dev/null || {
  echo "tools: $chromium is missing and there is no apt-get to install it; install Chromium and set CHROMIUM to its path" >&2
  exit 1
}
as_root=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "tools: installing chromium needs root (apt-get install chromium)" >&2; exit 1; }
  as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

install_chromium() { "${as_root[@]}" apt-get install -y -q --no-install-recommends chromium >/dev/null; }

echo "tools: installing chromium (apt)" >&2
if ! install_chromium 2>/dev/null; then
  "${as_root[@]}" apt-get update -q >/dev/null
  install_chromium
fi
[ -x "$chromium" ] || { echo "tools: chromium installed, but $chromium is not there; set CHROMIUM to its path" >&2; exit 1; }
