"""Stragglers (issue 30): the simulator's what-if against real sleep-mode runs with the same injection, the families'
sensitivity ranking, and blind localisation by `pipesim stragglers`' analysis.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_stragglers.py --quick --json out.json     # minutes: 4 ranks, 3 families
    OMP_NUM_THREADS=1 python bench/bench_stragglers.py --json out.json             # the issue's full set (hours here)

Every run is `python -m executor run --compute sleep` (each action sleeps its cost: F 10 ms, B 20 ms of which W
10 ms, per rank, so a 4-rank step is about 300 ms and the sleep's own imprecision, 2-3 us per sleep and 0.1-0.2 ms
of wake-up per action, priced by the run's calibration, stays far below 1% of it; real processes and gloo
transfers). A case is one family on P ranks with one injection (a slow rank at 1.2x or 1.5x on two ranks, or a
link delayed 2 or 5 ms). It runs as one launch whose steps alternate uniform and injected (`--inject-steps
alternate`: U I U I, step by step, which cancels a shared machine's drift far better than launches minutes apart
and costs one torchrun start-up per case); each injected step is paired with the uniform step before it, and a
case adds launches (up to --max-launches) until its CIs are tight. Per case: the predicted step (the run's own
prediction, its calibrated costs with the injection priced by pipesim.cost.perturb) against the injected steps'
median, and the predicted growth (the same costs without the injection against with it) against the measured one
(injected over uniform medians). The families' sensitivity (their mean growth over the cases) is ranked predicted
against measured (Kendall tau). Localisation: trials with a random rank (a random kind of its actions, factor in
[1.15, 1.5]) or link (1 to 5 ms), drawn here and kept from the analysis until scoring, plus trials with no
injection; `find_stragglers` reads only the run folder (every step injected there).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.analysis.stragglers import find_stragglers  # noqa: E402
from pipesim.io.formats import read_json  # noqa: E402
from pipesim.io.run_record import read_run  # noqa: E402
from pipesim.schedules import options_for, schedule_info  # noqa: E402
from pipesim.sim.steps import simulate_step  # noqa: E402
from pipesim_executor.config import run_config  # noqa: E402
from pipesim_executor.host.launch import run  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stragglers_stats as stats  # noqa: E402

FAMILIES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev")
QUICK_FAMILIES = ("1f1b", "zb-h1", "interleaved-1f1b")
COSTS = {"sleep_f": (10.0,), "sleep_b": (20.0,), "sleep_w": (10.0,)}  # ms: well above a loaded scheduler's wake-up


@dataclass(frozen=True)
class Pace:
    """How long the what-if cases run: launches per case (adaptive between min and max, stopping once both CIs' half
    widths are at most `target`), and a deadline (time.monotonic) after which no new case starts."""

    min_launches: int = 1
    max_launches: int = 1
    target: float = 0.01
    deadline: float = float("inf")


def microbatches(ranks: int) -> int:
    return 2 * ranks  # dualpipev needs >= 2P - 1; interleaving a multiple of P


def launch(
    root: Path,
    name: str,
    family: str,
    ranks: int,
    inject: tuple[str, ...],
    steps: int,
    costs: dict | None = None,
    alternate: bool = False,
) -> dict:
    """One sleep-mode run (`costs`: the sleep flags, default COSTS; `alternate`: uniform and injected steps
    alternating); its steps, its prediction (the injected steps'), its folder, and with `alternate` which steps
    carried the injection and the prediction of the uniform ones."""
    options = options_for(family, num_virtual_stages=2)
    config = run_config(
        schedule=family,
        num_ranks=ranks,
        num_microbatches=microbatches(ranks),
        compute="sleep",
        steps=steps,
        warmup_steps=1,
        inject=inject,
        inject_steps="alternate" if alternate else "all",
        timeout_s=600,
        **(costs or COSTS),
        **options,
    )
    result = run(config, runs_root=root, name=name)
    if result.status != "ok":
        raise RuntimeError(f"{name}: {result.status}: {result.message}")
    schedule = read_run(result.run_dir).schedule
    slept = config.compute.cost_model(schedule)  # the simulator's what-if on the slept costs alone
    out = {
        "slept_ms": simulate_step(schedule, config.inject.perturbation().apply(slept, schedule.stage_to_rank)).step_ms,
        "slept_uniform_ms": simulate_step(schedule, slept).step_ms,
        "measured_ms": result.measured_step_ms,
        "predicted_ms": result.predicted_step_ms,
        "steps_ms": result.step_times_ms,
        "dir": str(result.run_dir),
        "calibration": runtime_measured(result.run_dir),
    }
    if alternate:
        out["injected"] = read_json(result.run_dir / "measured.json")["injected_steps"]
        out["predicted_uniform_ms"] = read_json(result.run_dir / "result.json")["paired"]["predicted_uniform_step_ms"]
    return out


def runtime_measured(run_dir: Path) -> dict | None:
    """What the run measured of its runtime beyond the sleeps (cost.json's sleep_calibration), in short: medians
    over the ranks (us), where the prediction's extra time comes from."""
    calibration = (read_json(run_dir / "cost.json").get("meta") or {}).get("sleep_calibration")
    if not calibration:
        return None
    excess = [ms for kinds in calibration["excess_ms"].values() for ms in kinds.values()]
    transfers = [v for v in calibration["links_ms"].values() if v is not None]
    pinged = [v for v in calibration["links_ping_pong_ms"].values() if v is not None]

    def us(values: list[float]) -> float | None:
        return 1e3 * statistics.median(values) if values else None

    return {
        "sleep_overshoot_us": statistics.median(p["median_us"] for p in calibration["precise_sleep"]),
        "span_excess_us": us(excess),
        "dispatch_us": us(calibration["dispatch_ms"]),
        "tail_us": us(calibration["tail_ms"]),
        "transfer_us": us(transfers),
        "ping_pong_us": us(pinged),
    }


def cases_for(ranks: int, quick: bool) -> list[tuple[str, str]]:
    """(label, --inject text): slow ranks 1.2x and 1.5x on two ranks, a link delayed 2 and 5 ms."""
    if quick:
        return [("rank1x1.5", "slow-rank=1:1.5"), ("link1-2p5ms", "link-delay=1-2:5")]
    last = ranks - 1
    return [
        *((f"rank{r}x{f}", f"slow-rank={r}:{f}") for r in (1, last) for f in (1.2, 1.5)),
        *((f"link1-2p{ms}ms", f"link-delay=1-2:{ms}") for ms in (2, 5)),
    ]


def run_case(
    root: Path, name: str, family: str, ranks: int, text: str, steps: int, pace: Pace, costs: dict | None = None
) -> dict:
    """Launches of one case, each alternating uniform and injected steps, until its CIs are tight
    (stragglers_stats.tight over the step pairs of every launch so far) or pace.max_launches ran."""
    load = os.getloadavg()[0]
    runs: list[dict] = []
    row: dict = {}
    for k in range(pace.max_launches):
        runs.append(launch(root, f"{name}-{k}", family, ranks, (text,), steps, costs, alternate=True))
        row = stats.case_row(*stats.step_pairs(runs))
        if k + 1 >= pace.min_launches and stats.tight(row, pace.target):
            break
    row.update(family=family, ranks=ranks, inject=text, launches=len(runs), load=(load + os.getloadavg()[0]) / 2)
    row["slept_growth"] = runs[0]["slept_ms"] / runs[0]["slept_uniform_ms"] - 1  # the what-if on the sleeps alone
    row["runtime"] = [r["calibration"] for r in runs]
    return row


def what_if(
    root: Path,
    families: tuple[str, ...],
    sizes: tuple[int, ...],
    quick: bool,
    steps: int,
    pace: Pace,
    labels: tuple[str, ...] | None = None,
) -> list[dict]:
    """Every family on every case (`labels`: only the cases of those labels, e.g. rank1x1.5, link1-2p5ms)."""
    rows = []
    # case-major, the sizes interleaved: a run cut by --budget-min still has every family on the same cases
    count = len(cases_for(sizes[0], quick))  # the same for every size
    order = [(ranks, cases_for(ranks, quick)[index]) for index in range(count) for ranks in sizes]
    if labels is not None:
        known = {label for _, (label, _) in order}
        unknown = sorted(set(labels) - known)
        if unknown:
            raise SystemExit(f"--cases: unknown {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        order = [(ranks, case) for ranks, case in order if case[0] in labels]
    for ranks, (label, text) in order:
        for family in families:
            if time.monotonic() > pace.deadline:
                print(json.dumps({"skipped": [family, ranks, label], "why": "--budget-min spent"}), flush=True)
                continue
            row = run_case(root, f"{family}-{ranks}-{label}", family, ranks, text, steps, pace)
            row["case"] = label
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


# A light last rank (half the others' work): the zero-bubble schedules' W fill its slack, 1F1B has less of it.
LIGHT_LAST = {
    "sleep_f": (10.0, 10.0, 10.0, 5.0),
    "sleep_b": (20.0, 20.0, 20.0, 10.0),
    "sleep_w": (10.0, 10.0, 10.0, 5.0),
}
ABSORBED = (("zb-h1", "slow-rank=3:1.5:W"), ("zbv", "slow-rank=0:1.5:W"), ("1f1b", "slow-rank=3:1.5:W"))


def absorbed(root: Path, pace: Pace, steps: int) -> list[dict]:
    """Cases the simulator says the slack absorbs (or nearly): the measured growth, with its CI, must stay within
    1%. At least pace.min_launches launches each, every one pairing its steps."""
    rows = []
    for family, text in ABSORBED:
        row = run_case(root, f"abs-{family}", family, 4, text, steps, pace, LIGHT_LAST)
        row["case"] = "absorbed W"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def kinds_of(family: str) -> str:
    return "FIW" if schedule_info(family).split_backward else "FB"


def localisation(
    root: Path, trials: int, clean: int, families: tuple[str, ...], ranks: int, steps: int, seed: int
) -> dict:
    rng = random.Random(seed)
    rows = []
    plan = [None] * clean + ["trial"] * trials
    rng.shuffle(plan)
    for n, kind in enumerate(plan):
        family = rng.choice(families)
        truth: dict = {"family": family}
        inject: tuple[str, ...] = ()
        if kind is not None and rng.random() < 0.75:
            rank, factor, kinds = rng.randrange(ranks), round(rng.uniform(1.15, 1.5), 3), rng.choice(kinds_of(family))
            truth.update(rank=rank, factor=factor, kinds=kinds)
            inject = (f"slow-rank={rank}:{factor}:{kinds}",)
        elif kind is not None:
            a = rng.randrange(ranks - 1)
            ms = round(rng.uniform(1.0, 5.0), 2)
            truth.update(link=[a, a + 1], ms=ms)
            inject = (f"link-delay={a}-{a + 1}:{ms}",)
        out = launch(root, f"blind-{n}", family, ranks, inject, steps)
        record = read_run(out["dir"])  # the analysis sees the run folder, not the truth
        found = find_stragglers(record.schedule, record.outputs.measured, record.outputs.cost).to_dict()
        reported_ranks = [s["rank"] for s in found["stragglers"]]
        reported_links = [[k["src"], k["dst"]] for k in found["links"]]
        if "rank" in truth:
            right = reported_ranks == [truth["rank"]] and not reported_links
            est = found["stragglers"][0]["factor"] if right else None
            err = None if est is None else abs(est - truth["factor"])
        elif "link" in truth:
            right = reported_links == [truth["link"]] and not reported_ranks
            err = None if not right else abs(found["links"][0]["delay_ms"] - truth["ms"])
        else:
            right, err = not reported_ranks and not reported_links, None
        row = {"truth": truth, "found": found, "right": right, "error": err}
        rows.append(row)
        print(json.dumps(row), flush=True)
    injected = [r for r in rows if len(r["truth"]) > 1]
    rank_errors = [r["error"] for r in injected if "rank" in r["truth"] and r["error"] is not None]
    return {
        "trials": len(injected),
        "right": sum(r["right"] for r in injected),
        "median_factor_error": statistics.median(rank_errors) if rank_errors else None,
        "clean": len(rows) - len(injected),
        "false_alarms": sum(not r["right"] for r in rows if len(r["truth"]) == 1),
        "rows": rows,
    }


def real_compute(root: Path, pairs: int, steps: int) -> dict:
    """The executor's Transformer on 2 CPU ranks, profiled, uniform (A) and with rank 1 1.3x slower (B), A B A B.
    Two predictions of B: the run's own (its profile, the injection priced in) and the paired one: the A run's own
    measured actions (pipesim.analysis.overlay.replay_cost, A's profiled runtime kept) with the injection applied,
    which is what the what-if claims (the same machine, that rank slower). Each against B's measured median, with
    the bootstrap CI of that median."""
    from pipesim.analysis.overlay import replay_cost
    from pipesim.io.cost_file import load_cost
    from pipesim.sim.steps import simulate_step

    rows = []
    for k in range(pairs):
        runs = {}
        for label, inject in (("A", ()), ("B", ("slow-rank=1:1.3",))):
            config = run_config(
                schedule="1f1b", num_ranks=2, num_microbatches=4, steps=steps, profile=True, device="cpu",
                inject=inject, timeout_s=600,
            )  # fmt: skip
            result = run(config, runs_root=root, name=f"real-{label}{k}")
            if result.status != "ok":
                raise RuntimeError(f"real-{label}{k}: {result.status}: {result.message}")
            runs[label] = (config, result)
        (_, a), (config, b) = runs["A"], runs["B"]
        record = read_run(a.run_dir)
        own = load_cost(a.run_dir / "cost.json").for_pipeline(record.schedule.num_stages, record.schedule.num_ranks)
        replayed = replay_cost(record.outputs.measured, own)
        slowed = config.inject.perturbation().apply(replayed, record.schedule.stage_to_rank)
        paired = simulate_step(record.schedule, slowed).step_ms
        low, high = stats.error_ci(paired, [b.step_times_ms])
        row = {
            "pair": k,
            "uniform_ms": a.measured_step_ms,
            "uniform_predicted_ms": a.predicted_step_ms,
            "uniform_replayed_ms": simulate_step(record.schedule, replayed).step_ms,
            "measured_ms": b.measured_step_ms,
            "own_prediction_ms": b.predicted_step_ms,
            "own_error": b.prediction_error,
            "paired_prediction_ms": paired,
            "paired_error": paired / b.measured_step_ms - 1,
            "paired_error_ci": [low, high],
            "load": os.getloadavg()[0],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"rows": rows}


def sleep_precision(samples: int) -> list[dict]:
    """time.sleep against `precise_sleep` (sleep, then spin the last 100 us): overshoot in us per duration."""
    import time

    from pipesim_executor.rank.inject import precise_sleep

    rows = []
    for ms in (0.5, 1.0, 2.0, 5.0, 10.0):
        for name, sleep in (("time.sleep", time.sleep), ("sleep+spin", precise_sleep)):
            over = []
            for _ in range(samples):
                start = time.perf_counter()
                sleep(ms / 1e3)
                over.append(((time.perf_counter() - start) * 1e3 - ms) * 1e3)
            over.sort()
            row = {"ms": ms, "sleep": name, "median_us": statistics.median(over)}
            row.update(p90_us=over[int(0.9 * samples)], p99_us=over[int(0.99 * samples)], max_us=over[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 ranks, 3 families, 2 cases each, 4 + 1 trials")
    parser.add_argument("--steps", type=int, default=16, help="measured steps per launch: half of them injected")
    parser.add_argument("--ranks", type=lambda t: tuple(int(x) for x in t.split(",")), help="instead of the sizes")
    parser.add_argument("--families", type=lambda t: tuple(t.split(",")), help="instead of the mode's families")
    parser.add_argument("--cases", type=lambda t: tuple(t.split(",")), help="only these case labels (rank1x1.5,..)")
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--skip-what-if", action="store_true")
    parser.add_argument("--skip-localisation", action="store_true")
    parser.add_argument("--sleep-precision", type=int, default=0, metavar="N", help="N sleeps per duration, first")
    parser.add_argument(
        "--absorbed",
        type=int,
        default=0,
        metavar="LAUNCHES",
        help="the absorbed cases, >= LAUNCHES launches each",
    )
    parser.add_argument("--real", type=int, default=0, metavar="PAIRS", help="also the Transformer on 2 ranks")
    parser.add_argument("--min-launches", type=int, default=1, help="launches per case at least (default 1)")
    parser.add_argument("--max-launches", type=int, default=1, help="launches per case at most (default 1)")
    parser.add_argument("--target-ci", type=float, default=0.01, help="a case's CI half widths")
    parser.add_argument("--budget-min", type=float, default=0, help="start no new what-if case after this (0: none)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    deadline = time.monotonic() + 60 * args.budget_min if args.budget_min > 0 else float("inf")
    pace = Pace(args.min_launches, max(args.min_launches, args.max_launches), args.target_ci, deadline)
    families = args.families or (QUICK_FAMILIES if args.quick else FAMILIES)
    sizes = args.ranks or ((4,) if args.quick else (4, 8))
    out: dict = {"quick": args.quick, "load_before": os.getloadavg()[0]}
    if args.sleep_precision:
        out["sleep_precision"] = sleep_precision(args.sleep_precision)
    with tempfile.TemporaryDirectory(prefix="bench-stragglers-") as tmp:
        root = Path(tmp)
        if not args.skip_what_if:
            rows = what_if(root, families, sizes, args.quick, args.steps, pace, args.cases)
            out.update(rows=rows, summary=stats.summary(rows), ranking=stats.ranking(rows))
            print(json.dumps({"summary": out["summary"], "ranking": out["ranking"]}, indent=1), flush=True)
            print(stats.table(rows), flush=True)
        if not args.skip_localisation:
            trials, clean = (4, 1) if args.quick else (20, 5)
            out["localisation"] = localisation(root, trials, clean, families, 4, args.steps, args.seed)
            print(json.dumps({k: v for k, v in out["localisation"].items() if k != "rows"}), flush=True)
        if args.absorbed:
            out["absorbed"] = absorbed(root, replace(pace, min_launches=args.absorbed), args.steps)
            print(stats.table(out["absorbed"]), flush=True)
        if args.real:
            out["real_compute"] = real_compute(root, args.real, args.steps)
    out["load_after"] = os.getloadavg()[0]
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
