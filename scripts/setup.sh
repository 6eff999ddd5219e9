#!/usr/bin/env bash
# Create .venv and install the runtime and dev requirements (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
log=$(mktemp)
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" >&2
  echo "pip install failed" >&2
  exit 1
fi
rm -f "$log"
.venv/bin/python -c "import torch, networkx, plotly, streamlit" # fail loudly if the install did not work
