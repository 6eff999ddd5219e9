"""Why a verification's measured steps differ from the plan's predictions: for each verified candidate,
`pipesim.analysis.decompose` of its runs (measured median step less the deterministic prediction, split into
actions per kind, gaps and tail), read from the files a `verify-plan --json` left; nothing is run.

Usage:
    .venv/bin/python bench/diagnose_verify.py PLAN.json VERIFY.json [--json OUT]

The candidate's schedule and cost model are rebuilt from the plan's own inputs (its profile, devices, batch,
optimizer) through the planner (`Evaluator.materialise`), so the prediction decomposed is the plan's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.analysis.decompose import decompose  # noqa: E402
from pipesim.io.cost_file import load_cost_file  # noqa: E402
from pipesim.io.formats import read_json, timeline_from_dict, write_json  # noqa: E402
from pipesim.plan.candidates import Candidate  # noqa: E402
from pipesim.plan.evaluator import Evaluator  # noqa: E402
from pipesim.plan.inputs import PlanInputs  # noqa: E402
from pipesim.records import Timeline  # noqa: E402


def plan_inputs(plan: dict, folder: Path = Path(".")) -> PlanInputs:
    """The plan's inputs rebuilt from its recorded profile and settings (a relative profile path is tried from the
    working folder, then from the plan's `folder`)."""
    recorded = plan["inputs"]
    path = Path(recorded["cost_file"])
    profile = load_cost_file(path if path.is_absolute() or path.exists() else folder / path)
    return PlanInputs.from_profile(
        profile,
        devices=recorded["devices"],
        global_batch=recorded["global_batch"],
        memory_cap_bytes=recorded.get("memory_cap_bytes"),
        optimizer=recorded["optimizer"],
    )


def candidate_of(fields: dict) -> Candidate:
    """A plan candidate's dict as the planner's `Candidate` (its shape and split; the numbers are recomputed)."""
    return Candidate(
        schedule=fields["schedule"],
        ranks=fields["ranks"],
        microbatches=fields["microbatches"],
        virtual_stages=fields["virtual_stages"],
        recompute=fields["recompute"],
        microbatch_size=fields["microbatch_size"],
        w_share=fields.get("w_share"),
        data_parallel=fields.get("data_parallel", 1),
        split=tuple(fields["split"]),
        step_ms=fields["step_ms"],
    )


def measured_runs(run_dirs: list[str]) -> tuple[Timeline, list[float]]:
    """Every round's measured steps of one candidate as one timeline (steps renumbered across the rounds)."""
    spans, comm, times, offset = [], [], [], 0
    timeline = None
    for run_dir in run_dirs:
        document = read_json(Path(run_dir) / "measured.json")
        timeline = timeline_from_dict(document)
        steps = sorted({s.step for s in timeline.spans})
        spans += [s._replace(step=s.step + offset) for s in timeline.spans]
        comm += [c._replace(step=c.step + offset) for c in timeline.comm]
        times += [float(t) for t in document["step_times_ms"]]
        offset += len(steps)
    assert timeline is not None
    return Timeline(timeline.num_ranks, tuple(spans), "measured", timeline.schedule_name, tuple(comm)), times


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("verify", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    plan, verify = read_json(args.plan), read_json(args.verify)
    evaluator = Evaluator(plan_inputs(plan, args.plan.parent))
    rows = []
    for row in verify["candidates"]:
        if row.get("error") or not row.get("run_dirs"):
            continue
        candidate = candidate_of(row["candidate"])
        evaluator.price(candidate)
        schedule, cost = evaluator.materialise(candidate)
        measured, times = measured_runs(row["run_dirs"])
        parts = decompose(schedule, cost, measured, times, row["predicted_ms"])
        parts["label"] = row["label"]
        rows.append(parts)
        difference = parts["difference_ms"]
        kinds = " ".join(f"{k} {v:+.2f}" for k, v in parts["actions_ms"].items())
        print(
            f"{row['label']:<28} measured {parts['measured_step_ms']:7.2f}  deterministic "
            f"{parts['predicted_step_ms']:7.2f} (point {row['predicted_ms']:7.2f})  diff {difference:+6.2f}: "
            f"actions [{kinds}]  gaps {parts['gaps_ms']:+.2f} (jitter {_num(parts['measured_jitter_ms'])}, beyond "
            f"{_num(parts['gaps_beyond_jitter_ms'])})  tail {parts['tail_ms']:+.2f}"
        )
        for rank in parts["ranks"]:
            excess = " ".join(f"{k} {v:+.2f}" for k, v in rank["action_excess_ms"].items())
            print(
                f"    rank {rank['rank']}: excess per step [{excess}]  lead {rank['lead_ms']:.3f}  dispatch "
                f"{rank['dispatch_ms']:.3f} (priced {rank['priced_dispatch_ms']:.3f})  recv wait "
                f"{rank['recv_wait_ms']:.2f}  idle {rank['idle_ms']:.2f} (predicted {rank['predicted_idle_ms']:.2f})  "
                f"tail priced {rank['predicted_tail_ms']:.3f}"
            )
        hops = "  ".join(
            f"{b}: {h['measured_ms']:.3f} (priced {h['priced_ms']:.3f}, n={h['samples']})"
            for b, h in parts["hops"].items()
        )
        print(f"    in-run hop per boundary: {hops}")
        replays = parts["replay_makespan_ms"]
        print(
            f"    makespan replayed with the stages' medians {replays['medians']:.2f}, means {replays['means']:.2f}, "
            f"each step's own times {_num(replays['own'])[1:]}"
        )
    if args.json is not None:
        write_json({"candidates": rows}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
