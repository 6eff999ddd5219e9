#!/bin/bash
# Issue 35: each reported hostile input as its own process, with its exit status, wall time and peak memory
# (GNU time). Run from anywhere: bash bench/bench_refusals.sh (it works in a new temporary folder).
# Each reported case as its own process: exit status, wall seconds, peak memory (KB).
ROOT="$(cd "$(dirname "$0")/.." && pwd)"; export PYTHONPATH="$ROOT"; cd "$(mktemp -d)"
PY="$ROOT/.venv/bin/python"
P="$PY -m pipesim"; E="$PY -m pipesim_executor"
python3 - <<'PY'
import json
units={"time":"ms","size":"bytes","bandwidth":"GB/s"}
open("inf.json","w").write('{"format":"pipesim.cost","version":1,"units":{"time":"ms","size":"bytes","bandwidth":"GB/s"},"stages":[{"forward_ms":1e400,"backward_ms":2}]}')
json.dump({"format":"pipesim.cost","version":1,"stages":[{"forward_ms":1,"backward_ms":2}]},open("nounits.json","w"))
with open("pad.json","w") as f:
    f.write('{"format":"pipesim.cost","version":1,"units":{"time":"ms","size":"bytes","bandwidth":"GB/s"},"stages":[{"forward_ms":1,"backward_ms":2}],"meta":{"pad":[')
    f.write("0,"*100_000_000+"0]}}")
open("fw.csv","w",encoding="utf-8").write("０F０,0B0\r\n")
PY
$P plan --layers 2 --hidden 64 --ffn 128 --heads 2 --seq-len 16 --vocab 100 --devices 2 --global-batch 8 --optimizer sgd --dtype fp32 --json plan.json >/dev/null
python3 - <<'PY'
import json
p=json.load(open("plan.json"))
q=json.loads(json.dumps(p)); [c.update(schedule=None) for c in q["candidates"]]; json.dump(q,open("null.json","w"))
q=json.loads(json.dumps(p)); [c.update(split=[5,1,99]) for c in q["candidates"]]; json.dump(q,open("split.json","w"))
q=json.loads(json.dumps(p)); q["candidates"]=(p["candidates"]*6000)[:200000]; json.dump(q,open("big.json","w"))
PY
ls -la pad.json big.json
mkdir -p ro out; echo '{"old": true}' > out/s.json
while IFS= read -r line; do
  [ -z "$line" ] && continue
  start=$(date +%s.%N)
  /usr/bin/time -f "%M" -o mem.txt bash -c "$line" >/dev/null 2>err.txt; code=$?
  end=$(date +%s.%N)
  printf "%-95s exit %s  %5.2f s  %6d MB  %s\n" "${line:0:95}" "$code" "$(echo "$end - $start" | bc)" "$(( $(tail -1 mem.txt) / 1024 ))" "$(head -c 90 err.txt | tr '\n' ' ')"
done <<CASES
$E run --hidden 10000000
$E run --vocab 100000000000
$E run --seq-len 1000000000
$E run --model cnn --cnn-channels 100000000
$E profile --hidden 10000000 --out p1
$E profile --vocab 100000000000 --out p2
$E profile --seq-len 1000000000 --out p3
$E profile --model cnn --cnn-channels 100000000 --out p4
$E verify-plan plan.json --timeout -1
$E verify-plan plan.json --timeout nan
$E verify-plan plan.json --warmup-steps -1
$E cancel runs/x --timeout -5
$E run --seed -1
$E run --seed 100000000000000000000000
$P plan --devices 4 --global-batch 8 --memory-cap 1e400GiB
$P plan --devices 1000000000 --global-batch 8
$P balance --layer-ms 1,,2 --stages 2
$P app --port ' 80'
$E run --runs-root /dev/null
$P simulate --csv-in fw.csv
$P plan --cost inf.json --devices 2 --global-batch 4
$P simulate --schedule 1f1b --ranks 2 --microbatches 2 --cost inf.json
$P simulate --schedule 1f1b --ranks 2 --microbatches 2 --cost nounits.json
$P plan --cost pad.json --devices 2 --global-batch 4
$E verify-plan null.json --top 1
$E verify-plan split.json --top 1
$E verify-plan big.json --top 1
CASES
rm -f pad.json big.json
