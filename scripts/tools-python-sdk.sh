#!/usr/bin/env bash
# Installs the official Segment Python SDK at a pinned version, every file checked against its
# hash (scripts/python-sdk-requirements.txt), into a virtualenv in the
# git-ignored .tools/python-sdk/, for test/ingest/sdk-python.test.ts. Idempotent: a no-op when the
# pinned version (scripts/versions.sh) is already installed there. PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/versions.sh

venv="$PWD/.tools/python-sdk"
python="${PYTHON:-python3}"

installed() {
  [ -x "$venv/bin/python" ] \
    && [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("segment-analytics-python"))' 2>/dev/null)" = "$SEGMENT_PYTHON_VERSION" ]
}
if installed; then exit 0; fi

requirements=scripts/python-sdk-requirements.txt
grep -qx "segment-analytics-python==$SEGMENT_PYTHON_VERSION \\\\" "$requirements" || {
  echo "tools: $requirements does not pin segment-analytics-python==$SEGMENT_PYTHON_VERSION (scripts/versions.sh): bump both" >&2
  exit 1
}

# Debian ships venv's pip bootstrap apart from python3 (python3-venv): without it `python3 -m venv`
# fails half-way. Both come from apt when missing (scripts/apt-install.sh).
can_venv() { command -v "$python" >/dev/null && "$python" -c 'import venv, ensurepip' 2>/dev/null; }
if ! can_venv && [ -z "${PYTHON:-}" ]; then
  bash scripts/apt-install.sh python3 python3-venv || true
  hash -r
fi
command -v "$python" >/dev/null || {
  echo "tools: $python is needed for the Segment Python SDK test (Debian: apt-get install python3 python3-venv)" >&2
  exit 1
}
# The oldest Python every pinned package of $requirements has a release for (3.9 has no
# cryptography of that version); PYTHON=python3.12 picks another interpreter.
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "tools: the Segment Python SDK's pinned packages ($requirements) need Python >= 3.10; $python is $("$python" --version 2>&1) (PYTHON=<interpreter> picks another)" >&2
  exit 1
}
can_venv || {
  echo "tools: $python cannot create a virtualenv with pip (Debian: apt-get install python3-venv)" >&2
  exit 1
}

echo "tools: installing segment-analytics-python $SEGMENT_PYTHON_VERSION into .tools/python-sdk" >&2
# A venv left by another interpreter or an interrupted run is rebuilt rather than patched.
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --require-hashes -r "$requirements"
installed || { echo "tools: segment-analytics-python $SEGMENT_PYTHON_VERSION did not install into $venv" >&2; exit 1; }
