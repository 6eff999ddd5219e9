"""Stragglers: the simulator's what-if against real sleep-mode runs with the same injection, the families'
sensitivity ranking, the absorbed cases, real compute on 2 ranks, and blind localisation by `pipesim stragglers`.

Usage (the whole table, every part below, is the one command without flags; a part is left out by its flag):
    OMP_NUM_THREADS=1 python bench/bench_stragglers.py --json out.json     # 4 and 8 ranks, all parts (hours here)
    OMP_NUM_THREADS=1 python bench/bench_stragglers.py --quick --json out.json     # minutes: 4 ranks, 3 families
    OMP_NUM_THREADS=1 python bench/bench_stragglers.py --skip-what-if --skip-localisation --absorbed 0 \
        --real 4 --json real.json                                           # real compute only (minutes)
    OMP_NUM_THREADS=1 python bench/bench_stragglers.py --ranks 8 --families 1f1b --cases link1-2p5ms \
        --skip-localisation --absorbed 0 --real 0                           # one case (about a minute)

Every sleep-mode run is `python -m executor run --compute sleep` (stragglers_launch: each action sleeps its cost,
F 10 ms, B 20 ms of which W 10 ms, per rank, so a 4-rank step is about 300 ms and the sleep's own imprecision, 2-3
us per sleep and 0.1-0.2 ms of wake-up per action, priced by the run's calibration, stays far below 1% of it; real
processes and gloo transfers). A what-if case is one family on P ranks with one injection (a slow rank at 1.2x or
1.5x on two ranks, or a link delayed 2 or 5 ms). It runs as one launch whose steps alternate uniform and injected
(`--inject-steps alternate`: U I U I, step by step, which cancels a shared machine's drift far better than
launches minutes apart and costs one torchrun start-up per case); each injected step is paired with the uniform
step before it, and a case adds launches (up to --max-launches) until its CIs are tight. Per case: the predicted
step (the run's own prediction, its calibrated costs with the injection priced by pipesim.cost.perturb) against
the injected steps' median, and the predicted growth (the same costs without the injection against with it)
against the measured one (injected over uniform medians). The families' sensitivity (their mean growth over the
cases) is ranked predicted against measured (Kendall tau). The absorbed cases: a slower W on a rank with slack,
where the growth must stay within 1%. Real compute (stragglers_real): zoo models on 2 CPU ranks, profiled, each
pair one launch alternating uniform and injected steps, the prediction within 5% or inside the measured CI; its
headline is the profile's own prediction (`own`), the anchored figure (half measurement) after it.
Localisation (stragglers_blind): random injections hidden from `find_stragglers` until scoring.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stragglers_stats as stats  # noqa: E402
from stragglers_blind import localisation  # noqa: E402
from stragglers_launch import launch  # noqa: E402
from stragglers_real import PREDICTIONS, real_compute  # noqa: E402

FAMILIES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev")
QUICK_FAMILIES = ("1f1b", "zb-h1", "interleaved-1f1b")


@dataclass(frozen=True)
class Pace:
    """How long the what-if cases run: launches per case (adaptive between min and max, stopping once both CIs' half
    widths are at most `target`), and a deadline (time.monotonic) after which no new case starts."""

    min_launches: int = 1
    max_launches: int = 1
    target: float = 0.01
    deadline: float = float("inf")


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
        "--absorbed", type=int, metavar="LAUNCHES", help=">= LAUNCHES launches per absorbed case (default 1; --quick 0)"
    )
    parser.add_argument(
        "--real", type=int, metavar="PAIRS", help="real-compute launches per case (default 4; --quick 0)"
    )
    parser.add_argument("--real-steps", type=int, default=40, help="a real launch's measured steps: half injected")
    parser.add_argument("--real-cases", type=lambda t: tuple(t.split(",")), help="only these real cases (labels)")
    parser.add_argument("--min-launches", type=int, default=1, help="launches per case at least (default 1)")
    parser.add_argument("--max-launches", type=int, default=1, help="launches per case at most (default 1)")
    parser.add_argument("--target-ci", type=float, default=0.01, help="a case's CI half widths")
    parser.add_argument("--budget-min", type=float, default=0, help="start no new what-if case after this (0: none)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep-runs", type=Path, metavar="DIR", help="keep the run folders there (default: removed)")
    args = parser.parse_args()
    deadline = time.monotonic() + 60 * args.budget_min if args.budget_min > 0 else float("inf")
    pace = Pace(args.min_launches, max(args.min_launches, args.max_launches), args.target_ci, deadline)
    families = args.families or (QUICK_FAMILIES if args.quick else FAMILIES)
    sizes = args.ranks or ((4,) if args.quick else (4, 8))
    absorbed_launches = args.absorbed if args.absorbed is not None else 0 if args.quick else 1
    real_pairs = args.real if args.real is not None else 0 if args.quick else 4
    out: dict = {"quick": args.quick, "load_before": os.getloadavg()[0]}
    if args.sleep_precision:
        out["sleep_precision"] = sleep_precision(args.sleep_precision)
    with tempfile.TemporaryDirectory(prefix="bench-stragglers-") as tmp:
        root = args.keep_runs or Path(tmp)
        if not args.skip_what_if:
            rows = what_if(root, families, sizes, args.quick, args.steps, pace, args.cases)
            out.update(rows=rows, summary=stats.summary(rows), ranking=stats.ranking(rows))
            print(json.dumps({"summary": out["summary"], "ranking": out["ranking"]}, indent=1), flush=True)
            print(stats.table(rows), flush=True)
        if not args.skip_localisation:
            trials, clean = (4, 1) if args.quick else (20, 5)
            out["localisation"] = localisation(root, trials, clean, families, 4, args.steps, args.seed)
            print(json.dumps({k: v for k, v in out["localisation"].items() if k != "rows"}), flush=True)
        if absorbed_launches:
            out["absorbed"] = absorbed(root, replace(pace, min_launches=absorbed_launches), args.steps)
            print(stats.table(out["absorbed"]), flush=True)
        if real_pairs:
            out["real_compute"] = real = real_compute(root, real_pairs, args.real_steps, args.real_cases)
            print(stats.real_table(real["rows"], PREDICTIONS), flush=True)
            print(stats.real_summary_table(real["cases"], PREDICTIONS), flush=True)
            print(json.dumps({"real_verdict": real["verdict"]}), flush=True)
            print(stats.real_headline(real["verdict"]), flush=True)
    out["load_after"] = os.getloadavg()[0]
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
