#!/usr/bin/env bash
# Installs Debian packages for the tools scripts: as root, or with sudo when it needs no password.
# Refreshes the package lists only when an install from the present ones fails (a fresh machine
# has none; an old one may name versions long gone). Usage: bash scripts/apt-install.sh PACKAGE...
set -euo pipefail
command -v apt-get >/dev/null || { echo "tools: no apt-get to install $*; install them yourself" >&2; exit 1; }
as_root=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "tools: installing $* needs root (apt-get install $*)" >&2; exit 1; }
  as_root=(sudo -n)
fi
export DEBIAN_FRONTEND=noninteractive
install() { "${as_root[@]}" apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
echo "tools: installing $* (apt)" >&2
if ! install "$@" 2>/dev/null; then
  "${as_root[@]}" apt-get update -q >/dev/null
  install "$@"
fi
