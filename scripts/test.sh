#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1
.venv/bin/ruff check --quiet . # style and import rules (pyproject.toml)
.venv/bin/ruff format --check --quiet . # one layout for all code: run `.venv/bin/ruff format .` to apply it
# Three workers (pytest-xdist), each test file whole in one worker (its module fixtures built once, its tests in
# order): most of the time is tests waiting on the processes they start, which overlap across workers, and on a
# busy machine more workers get more of its CPU. On 2 cores with a busy loop on each, three took 7 min 41 s where
# two took 8 min 45 s (docs/benchmarks.md). Tests use free ports and temporary folders only. Files are handed out in the order
# tests/conftest.py puts them (those that start real processes first; xdist's own order, the most tests first,
# left the long ones for the end). `-n 0` (given after) runs in one process.
set +e
.venv/bin/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder "$@"
status=$?
set -e
# pytest exits 5 when it collected no test: that is a failure here, not a pass.
if [ "$status" -eq 5 ]; then
  echo "no tests ran" >&2
  exit 1
fi
exit "$status"
