#!/usr/bin/env bash
# The test suite's time as issue 34 judges it: CI in a fresh clone while a busy loop runs on each of 2 cores.
#   bash bench/ci_under_load.sh [CLONE_DIR] [LOG]    (defaults: /tmp/pipesim-ci-load, /tmp/pipesim-ci-load.log)
# Clones this checkout's HEAD (no .venv: setup from pip's cache), runs `CI=true bash .ci/run` with two busy loops
# in this session (so the loops and the tests share the cores thread by thread), samples the 1-minute load every
# 30 s into LOG.load, and ends LOG with the exit status and the wall time in seconds.
set -euo pipefail
clone=${1:-/tmp/pipesim-ci-load}
log=${2:-/tmp/pipesim-ci-load.log}
rm -rf "$clone"
git clone -q "$(cd "$(dirname "$0")/.." && pwd)" "$clone"
cd "$clone"
timeout 1800 bash -c 'while :; do :; done' &
loop1=$!
timeout 1800 bash -c 'while :; do :; done' &
loop2=$!
(while sleep 30; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; done) >"$log.load" &
sampler=$!
trap 'kill $loop1 $loop2 $sampler 2>/dev/null || true' EXIT
start=$(date +%s)
set +e
CI=true bash .ci/run >"$log" 2>&1
status=$?
set -e
echo "rc=$status wall=$(($(date +%s) - start))s" | tee -a "$log"
exit "$status"
