#!/usr/bin/env bash
# Run the tests that start processes again and again while busy loops occupy every core, and count failures.
#   bash scripts/stress_torchrun.sh [ROUNDS] [PYTEST SELECTION...]
# Default: 30 rounds of the torchrun tests that create process groups (teardown, runtime, launch, lifecycle).
# A flaky test is a defect: any failure prints its log and the script exits 1.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-30}
shift || true
selection=("$@")
if [ ${#selection[@]} -eq 0 ]; then
  selection=(tests/test_teardown.py tests/test_executor_runtime.py tests/test_run_lifecycle.py
             "tests/test_launch.py::test_real_two_rank_run_with_profile_and_reference")
fi
cores=$(nproc --all)  # --all: plain nproc obeys OMP_NUM_THREADS, which is 1 below
export OMP_NUM_THREADS=1
busy=()
for _ in $(seq "$cores"); do
  ( while :; do :; done ) &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT
log=$(mktemp -d)
failures=0
start=$(date +%s)
for round in $(seq "$rounds"); do
  if .venv/bin/python -m pytest -q -x -p no:cacheprovider "${selection[@]}" >"$log/round$round.log" 2>&1; then
    echo "round $round: $(tail -1 "$log/round$round.log") (load $(cut -d' ' -f1 /proc/loadavg))"
  else
    failures=$((failures + 1))
    echo "round $round: FAILED (load $(cut -d' ' -f1 /proc/loadavg))"
    grep -E "FAILED|Error|terminate called|exit code" "$log/round$round.log" | head -20
  fi
done
echo "$rounds rounds, $failures failed, $(( $(date +%s) - start )) s, $cores busy loops, $(date -u +%Y-%m-%dT%H:%MZ)"
[ "$failures" -eq 0 ]
