"""Profile, plan and verify a model as a user does, beside other work: what the tools say when the machine is busy.

Usage:
    OMP_NUM_THREADS=1 python bench/busy_flow.py --model heldout_autoencoder --loops 2 --out out/busy-flow

Starts `--loops` busy loops (`while :; do :; done`, as bench/ci_under_load.sh does; 0: none, for a machine that is
busy already), then, with bench/bench_plan_verify.py's settings for the model: `executor profile` (2 ranks, sizes
2 and 4, two launches), `pipesim plan --cost` from it (refused when the profile is disturbed; then again with
`--accept-disturbed-profile`, as the refusal says), and `verify-plan` over the plan's top `--top` candidates in 3
rounds. Prints the profile's load record and verdict, the plan's refusal, and the verification's table with its
status. The loops stop when the script ends. Issue 46 asks that the flow end in a flagged profile or a "not
comparable" verification on a busy machine, never in "100% inside" with +-50% intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_plan_verify  # noqa: E402

from pipesim_executor.host.verify import summary_lines, verify_plan  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="heldout_autoencoder", choices=sorted(bench_plan_verify.MODELS))
    parser.add_argument("--loops", type=int, default=2, help="busy loops to start (0: none)")
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("out/busy-flow"))
    args = parser.parse_args()
    settings = bench_plan_verify.parse_args(["--models", args.model, "--top", str(args.top)])
    args.out.mkdir(parents=True, exist_ok=True)
    loops = [
        subprocess.Popen(["timeout", "3600", "bash", "-c", "while :; do :; done"], start_new_session=True)
        for _ in range(max(0, args.loops))
    ]
    try:
        started = time.perf_counter()
        cost = bench_plan_verify.profile(bench_plan_verify.MODELS[args.model], settings, args.out / "profile")
        provenance = json.loads(cost.read_text())["provenance"]
        print(f"profiled in {time.perf_counter() - started:.0f} s; load record {provenance.get('machine_load')}")
        verdict = (provenance.get("check") or {}).get("disturbance") or {}
        print(f"profile: {verdict.get('line', 'no verdict')}", flush=True)
        plan_path = args.out / "plan.json"
        command = [
            sys.executable, "-m", "pipesim", "plan", "--cost", str(cost), "--devices", "2",
            "--global-batch", str(settings.global_batch), "--optimizer", settings.optimizer,
            "--microbatch-sizes", settings.microbatch_sizes, "--chunks", "2", "--exhaustive", "--json", str(plan_path),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        print(f"plan: exit {done.returncode}; {done.stderr.strip()[-800:] or 'accepted'}", flush=True)
        if done.returncode != 0:
            done = subprocess.run([*command, "--accept-disturbed-profile"], cwd=ROOT, capture_output=True, text=True)
            print(f"plan --accept-disturbed-profile: exit {done.returncode}", flush=True)
            if done.returncode != 0:
                print(done.stderr.strip()[-800:])
                return 1
        verification = verify_plan(plan_path, args.top, runs_root=args.out / "runs", steps=settings.steps,
                                   rounds=settings.rounds, device="cpu", min_seconds=settings.min_seconds,
                                   timeout_s=600)  # fmt: skip
        print(f"verification: status {verification.status} {verification.not_comparable_because}")
        print("\n".join(summary_lines(verification)))
        return 0
    finally:
        for loop in loops:
            os.killpg(loop.pid, 15)


if __name__ == "__main__":
    sys.exit(main())
