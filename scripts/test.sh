#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1
.venv/bin/ruff check --quiet . # style and import rules (pyproject.toml)
.venv/bin/ruff format --check --quiet . # one layout for all code: run `.venv/bin/ruff format .` to apply it
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
# pytest exits 5 when it collected no test: that is a failure here, not a pass.
if [ "$status" -eq 5 ]; then
  echo "no tests ran" >&2
  exit 1
fi
exit "$status"
