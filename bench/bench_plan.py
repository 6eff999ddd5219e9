"""Speed of the planner: candidates evaluated per second (`pipesim.plan.search.evaluate_all`), each one exact.

Usage:
    python bench/bench_plan.py            # the two grids below, best of 3
    python bench/bench_plan.py --quick    # one repeat of the typical grid (a smoke test)
    python bench/bench_plan.py --against /work/main   # this tree against another checkout, side by side
    python bench/bench_plan.py --against 95f1942 --rounds 5   # against a git revision (a temporary worktree)

With --against (a checkout's folder, or a git revision checked out into a temporary worktree and removed after),
issue 21's 2,232-candidate plan runs through the command line (`plan ... --json`, as bench_quick runs it) in fresh
processes alternating A B A B between the other tree and this one, --rounds times (--paths plan,simulate,balance
adds `simulate` of 131,072 actions with --json and `balance` of a 10^6-stage cost file); each round's ratio this / other
is printed with the median, a 95% bootstrap interval of the mean ratio, and each side's largest process (peak
RSS). A before/after comparison measured in one run, so a busy machine slows both sides alike. --grids adds the
in-process grids below (best of --repeat per process, three alternating rounds).

Grids (a 24-layer, 2048-wide model description, 8 devices, global batch 64, 80 GiB cap, Adam):
  typical: every registered schedule, pipeline depths 2/4/8 (the rest data parallel), microbatch sizes
           1/2/4/8, chunks 1/2/4, recompute off/on, W shares 0.3..0.7 by 0.1;
  10k:     the same with W shares 0.20..0.80 by 0.005 (121 values: a sensitivity sweep over the least known
           cost), which takes the space past 10,000 candidates.
Every candidate is exact: simulated with the simulator's own sweep and its memory walked, or pruned by a lower
bound that proves it cannot change the answer (`pipesim.plan.prune`); nothing is sampled.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
# PIPESIM_TREE: the checkout whose pipesim is measured (--against runs this script once per tree)
sys.path.insert(0, os.environ.get("PIPESIM_TREE", str(Path(__file__).resolve().parents[1])))

from pipesim.cost.description import ModelDescription  # noqa: E402
from pipesim.plan.report import best_candidate, pareto_front  # noqa: E402
from pipesim.plan.search import PlanInputs, PlanSpace, evaluate_all  # noqa: E402
from pipesim.schedules import schedule_names  # noqa: E402

MODEL = ModelDescription(num_layers=24, hidden_size=2048, ffn_size=8192, num_heads=16, seq_len=2048)
INPUTS = PlanInputs.from_description(MODEL, devices=8, global_batch=64, memory_cap_bytes=80 * 2**30)


def grid(shares: tuple[float, ...]) -> PlanSpace:
    return PlanSpace(
        schedules=tuple(schedule_names()),
        microbatch_sizes=(1, 2, 4, 8),
        chunks=(1, 2, 4),
        recompute=(False, True),
        w_shares=shares,
        ranks=(2, 4, 8),
    )


def run(name: str, space: PlanSpace, repeat: int) -> None:
    best_s, candidates = float("inf"), []
    for _ in range(repeat):
        start = time.perf_counter()
        candidates = evaluate_all(INPUTS, space)
        front, best = pareto_front(candidates), best_candidate(candidates)
        best_s = min(best_s, time.perf_counter() - start)
    built = sum(c.error is None for c in candidates)
    actions = sorted(c.ranks * c.virtual_stages * c.microbatches * 3 for c in candidates if c.error is None)
    print(
        f"{name:8} {len(candidates):6} candidates ({built} built, {len(candidates) - built} cannot be built; "
        f"median {actions[len(actions) // 2]} actions) in {best_s:.2f} s: {len(candidates) / best_s:,.0f} "
        f"candidates/s; front {len(front)}, best {best.label if best else None}"
    )


GRIDS = {
    "typical": lambda: grid((0.3, 0.4, 0.5, 0.6, 0.7)),
    "10k": lambda: grid(tuple(round(0.2 + 0.005 * i, 3) for i in range(121))),
}


def child(name: str, repeat: int) -> None:
    """The best of `repeat` timed evaluations of a grid in this process, printed as JSON for --against's parent."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        candidates = evaluate_all(INPUTS, GRIDS[name]())
        best_candidate(candidates)
        pareto_front(candidates)
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"seconds": best, "candidates": len(candidates)}))


HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "bench"))
from bench_quick import PLAN_ARGS  # noqa: E402

SIMULATE_ARGS = ["simulate", "--schedule", "1f1b", "--ranks", "64", "--microbatches", "1024"]  # 131,072 actions


def cli_run(tree: Path, argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MiB, the process and the workers it waited for) and CPU seconds (user + system,
    theirs too: steadier than the wall on a busy machine) of `python -m pipesim ARGV` with the pipesim of `tree`,
    as a user starts it (compiled modules cached: PYTHONDONTWRITEBYTECODE dropped)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "pipesim", *argv], cwd=tree, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"pipesim {' '.join(argv[:3])} ... failed in {tree} (status {status})")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def stage_file(path: Path, stages: int = 10**6) -> Path:
    """A cost file of `stages` stages with random times (seed 1), as a layer-by-layer profile writes them."""
    from pipesim.cost.model import CostModel
    from pipesim.io.cost_file import cost_to_dict

    rng = random.Random(1)
    document = cost_to_dict(CostModel.uniform())
    document["stages"] = [
        {"forward_ms": f, "backward_ms": 2 * f, "weight_ms": None, "activation_bytes": 1048576.0,
         "weight_grad_bytes": None, "input_bytes": 65536.0, "output_bytes": 65536.0, "param_bytes": 4194304.0}
        for f in (round(rng.uniform(0.5, 2), 4) for _ in range(stages))
    ]  # fmt: skip
    path.write_text(json.dumps(document))
    return path


def mean_interval(ratios: list[float], draws: int = 2000) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of the mean of `ratios` (fixed seed: the same rounds print the same)."""
    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def against_cli(other: Path, rounds: int, paths: list[str]) -> None:
    """Each command line path of `paths` (plan, simulate, balance) in fresh processes, alternating other, this,
    other, this... within every round."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        argv = {
            "plan": lambda side: [*PLAN_ARGS, "--json", str(folder / f"{side}.json")],
            "simulate": lambda side: [*SIMULATE_ARGS, "--json", str(folder / f"{side}-sim.json")],
            "balance": lambda side: ["balance", "--cost", str(folder / "stages.json"), "--stages", "4"],
        }
        if "balance" in paths:  # in a child: a parent grown by the file would count in every child's peak RSS
            command = [sys.executable, __file__, "--stage-file", str(folder / "stages.json")]
            subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(HERE)})
        seconds = {(path, side): [] for path in paths for side in ("other", "this")}
        cpu = {key: [] for key in seconds}
        memory = dict.fromkeys(seconds, 0.0)
        for path in paths:  # a warm-up run each, not counted: the first compiles and caches the modules
            for side, tree in (("other", other), ("this", HERE)):
                cli_run(tree, argv[path](side))
        for _ in range(rounds):
            for path in paths:
                for side, tree in (("other", other), ("this", HERE)):
                    wall, mib, used = cli_run(tree, argv[path](side))
                    seconds[(path, side)].append(wall)
                    cpu[(path, side)].append(used)
                    memory[(path, side)] = max(memory[(path, side)], mib)
        same = _same_answer(folder / "other.json", folder / "this.json") if "plan" in paths else None
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores, {rounds} rounds A B")
    print(f"  other: {other}; this: {HERE}")
    for path in paths:
        ratios = [mine / theirs for mine, theirs in zip(seconds[(path, "this")], seconds[(path, "other")], strict=True)]
        low, high = mean_interval(ratios)
        median = statistics.median(ratios)
        for side in ("other", "this"):
            runs = ", ".join(f"{s:.2f}" for s in seconds[(path, side)])
            used = ", ".join(f"{s:.2f}" for s in cpu[(path, side)])
            print(f"  {path:8} {side:5}: {runs} s wall; {used} s CPU; largest process {memory[(path, side)]:.0f} MiB")
        extra = f"; same best and front: {same}" if path == "plan" else ""
        cpu_ratio = statistics.median(cpu[(path, "this")]) / statistics.median(cpu[(path, "other")])
        extra = f"; CPU this / other {cpu_ratio:.3f} (medians){extra}"
        print(
            f"{path:8} this / other = {median:.3f} median, mean {statistics.fmean(ratios):.3f} (95% CI {low:.3f}.."
            f"{high:.3f}); speed-up {1 / median:.2f}x{extra}"
        )


def _same_answer(first: Path, second: Path) -> bool:
    """Whether two plan JSONs name the same best candidate and the same Pareto front (the numbers compared)."""

    def answer(path: Path) -> tuple:
        document = json.loads(path.read_text())
        keys = ("schedule", "ranks", "microbatches", "virtual_stages", "recompute", "microbatch_size", "w_share")
        entry = lambda c: None if c is None else tuple(c[k] for k in (*keys, "step_ms", "peak_memory_bytes"))  # noqa: E731
        return entry(document["best"]), [entry(c) for c in document["pareto"]]

    return answer(first) == answer(second)


def checkout(rev: str, folder: Path) -> Path:
    """A detached worktree of git revision `rev` in `folder` (removed by `remove_checkout`)."""
    subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(folder), rev], check=True,
                   capture_output=True)  # fmt: skip
    return folder


def remove_checkout(folder: Path) -> None:
    subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(folder)], check=False,
                   capture_output=True)  # fmt: skip


def against(other: Path, names: list[str], repeat: int) -> None:
    """Each grid in fresh processes alternating three times between the other checkout's pipesim and this one's,
    each process timing `repeat` evaluations; the best of each side."""
    here = HERE
    for name in names:
        best = {"other": float("inf"), "this": float("inf")}
        for _ in range(3):
            for side, tree in (("other", other), ("this", here)):
                env = {**os.environ, "PIPESIM_TREE": str(tree)}
                command = [sys.executable, __file__, "--child", name, "--repeat", str(repeat)]
                out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                best[side] = min(best[side], json.loads(out.stdout)["seconds"])
        print(
            f"{name:8} {other}: {best['other']:.3f} s, this tree: {best['this']:.3f} s, "
            f"this / other = {best['this'] / best['other']:.2f} (best of 3 x {repeat} each, alternating)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", metavar="TREE_OR_REV", help="another checkout, or a git revision, to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of --against (default 5)")
    parser.add_argument("--grids", action="store_true", help="with --against, the in-process grids too")
    parser.add_argument(
        "--paths",
        type=lambda text: [p for p in text.split(",") if p],
        default=["plan"],
        help="with --against, command line paths to time: plan (issue 21's 2,232 candidates), simulate (131,072 "
        "actions with --json), balance (a cost file of 10^6 stages into 4); default plan",
    )
    parser.add_argument("--child", choices=sorted(GRIDS), help=argparse.SUPPRESS)
    parser.add_argument("--stage-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeat)
        return
    if args.stage_file is not None:
        stage_file(args.stage_file)
        return
    repeat = 1 if args.quick else args.repeat
    names = ["typical"] if args.quick else ["typical", "10k"]
    if args.against is not None:
        if args.rounds < 2:
            parser.error(f"--rounds must be at least 2 (an interval needs two ratios), got {args.rounds}")
        unknown = sorted(set(args.paths) - {"plan", "simulate", "balance"})
        if unknown or not args.paths:
            parser.error(f"--paths takes plan, simulate and balance, got {','.join(unknown) or 'none'}")
        given = Path(args.against)
        with tempfile.TemporaryDirectory() as tmp:
            other = given.resolve() if given.is_dir() else checkout(args.against, Path(tmp) / "other")
            try:
                against_cli(other, args.rounds, args.paths)
                if args.grids:
                    against(other, names, repeat)
            finally:
                if not given.is_dir():
                    remove_checkout(other)
        return
    for name in names:
        run(name, GRIDS[name](), repeat)


if __name__ == "__main__":
    main()
