#!/usr/bin/env bash
# Create .venv, install the runtime and dev requirements, then the checkout itself in editable mode (`import
# pipesim` from any folder, the notebook's own included; the `pipesim` and `pipesim-run` commands). Idempotent:
# when the requirement files have not changed since the last successful install (a stamp in .venv records their
# hash) and the checkout is installed as it is now (a second stamp: pyproject.toml and the folder), it checks the
# imports and returns in about a second. The first install downloads and unpacks about 1.5 GB: two to three
# minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "setup: $python not found; install Python 3.11 or newer (or set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: found Python $version at $(command -v "$python"); pipesim needs 3.11 or newer (set PYTHON=...)" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with Python $version"
  "$python" -m venv .venv
fi
stamp=.venv/.pipesim-requirements
wanted=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
imports="import torch, networkx, plotly, streamlit, pytest, xdist, playwright"
editable_stamp=.venv/.pipesim-editable
root=$(pwd)
editable_wanted=$( (cat pyproject.toml; echo "$root") | sha256sum | cut -d' ' -f1)
# The checkout, editable (no dependencies: requirements.txt has them); checked from another folder, so that the
# import is the installed one and not the current folder's.
install_checkout() {
  if [ -f "$editable_stamp" ] && [ "$(cat "$editable_stamp")" = "$editable_wanted" ] \
    && (cd / && "$root/.venv/bin/python" -c "import pipesim, pipesim_examples" 2>/dev/null); then
    return 0
  fi
  echo "setup: installing this checkout into .venv (editable: pip install -e . --no-deps)"
  if ! .venv/bin/python -m pip install --disable-pip-version-check --quiet --no-deps --no-build-isolation -e . \
    >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "setup: pip install -e . failed (the end of its log is above)" >&2
    exit 1
  fi
  echo "$editable_wanted" > "$editable_stamp"
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && .venv/bin/python -c "$imports" 2>/dev/null; then
  install_checkout
  echo "setup: .venv is up to date"
  exit 0
fi
echo "setup: installing requirements-dev.txt into .venv (torch 2.13.0 CPU build, streamlit, plotly, ...)"
# pip's "Collecting ..." lines show that it is moving; the full log is shown only when the install fails.
set +e
.venv/bin/python -m pip install --disable-pip-version-check --progress-bar off -r requirements-dev.txt 2>&1 \
  | tee "$log" | grep --line-buffered -E "^(Collecting|Installing collected)" | sed -u 's/^/setup:   /'
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ] || ! .venv/bin/python -c "$imports" 2>/dev/null; then
  grep -v "^WARNING: Location" "$log" | tail -40 >&2
  echo "setup: pip install failed (the end of its log is above)" >&2
  exit 1
fi
echo "$wanted" > "$stamp"
install_checkout
echo "setup: done ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
