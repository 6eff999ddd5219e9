"""Stragglers (issue 30): the simulator's what-if against real sleep-mode runs with the same injection, the families'
sensitivity ranking, and blind localisation by `pipesim stragglers`' analysis.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_stragglers.py --quick --json out.json     # minutes: 4 ranks, 3 families
    OMP_NUM_THREADS=1 python bench/bench_stragglers.py --json out.json             # the issue's full set (hours here)

Every run is `python -m executor run --compute sleep` (each action sleeps its cost: F 10 ms, B 20 ms of which W
10 ms, per rank, well above a loaded machine's wake-up delays; real processes and gloo transfers). A case is one
family on P ranks with one injection (a slow rank at 1.2x or 1.5x on two ranks, or a link delayed 2 or 5 ms); it
runs paired with the family's uniform run, A B A B (A B with --quick), so both see the same drift of a shared
machine. Per case: the predicted step (the run's own
prediction, the injection priced by pipesim.cost.perturb) against the measured median, and the predicted growth
(B over A, simulated) against the measured one (the medians of B over those of A). The families' sensitivity
(their mean growth over the cases) is ranked predicted against measured (Kendall tau). Localisation: trials with a
random rank (a random kind of its actions, factor in [1.15, 1.5]) or link (1 to 5 ms), drawn here and kept from
the analysis until scoring, plus trials with no injection; `find_stragglers` reads only the run folder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.analysis.stragglers import find_stragglers  # noqa: E402
from pipesim.io.run_record import read_run  # noqa: E402
from pipesim.schedules import options_for, schedule_info  # noqa: E402
from pipesim_executor.config import run_config  # noqa: E402
from pipesim_executor.host.launch import run  # noqa: E402

FAMILIES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev")
QUICK_FAMILIES = ("1f1b", "zb-h1", "interleaved-1f1b")
COSTS = {"sleep_f": (10.0,), "sleep_b": (20.0,), "sleep_w": (10.0,)}  # ms: well above a loaded scheduler's wake-up


def microbatches(ranks: int) -> int:
    return 2 * ranks  # dualpipev needs >= 2P - 1; interleaving a multiple of P


def launch(
    root: Path, name: str, family: str, ranks: int, inject: tuple[str, ...], steps: int, costs: dict | None = None
) -> dict:
    """One sleep-mode run (`costs`: the sleep flags, default COSTS); its median step, its prediction, its folder."""
    options = options_for(family, num_virtual_stages=2)
    config = run_config(
        schedule=family,
        num_ranks=ranks,
        num_microbatches=microbatches(ranks),
        compute="sleep",
        steps=steps,
        warmup_steps=1,
        inject=inject,
        timeout_s=600,
        **(costs or COSTS),
        **options,
    )
    result = run(config, runs_root=root, name=name)
    if result.status != "ok":
        raise RuntimeError(f"{name}: {result.status}: {result.message}")
    return {
        "measured_ms": result.measured_step_ms,
        "predicted_ms": result.predicted_step_ms,
        "steps_ms": result.step_times_ms,
        "dir": str(result.run_dir),
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


def what_if(root: Path, families: tuple[str, ...], sizes: tuple[int, ...], quick: bool, steps: int) -> list[dict]:
    rows = []
    for ranks in sizes:
        for family in families:
            for label, text in cases_for(ranks, quick):
                pairs = 1 if quick else 2
                a_runs, b_runs = [], []
                for k in range(pairs):  # A B A B: the uniform run and the injected one, interleaved
                    a_runs.append(launch(root, f"{family}-{ranks}-{label}-A{k}", family, ranks, (), steps))
                    b_runs.append(launch(root, f"{family}-{ranks}-{label}-B{k}", family, ranks, (text,), steps))
                a = statistics.median(r["measured_ms"] for r in a_runs)
                b = statistics.median(r["measured_ms"] for r in b_runs)
                pa, pb = a_runs[0]["predicted_ms"], b_runs[0]["predicted_ms"]
                row = {
                    "family": family,
                    "ranks": ranks,
                    "case": label,
                    "uniform_ms": a,
                    "measured_ms": b,
                    "predicted_ms": pb,
                    "step_error": pb / b - 1,
                    "predicted_growth": pb / pa - 1,
                    "measured_growth": b / a - 1,
                    "growth_error": (pb / pa) / (b / a) - 1,
                    "paired_error": a * pb / pa / b - 1,  # the uniform run's measured step times the predicted growth
                }
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


def absorbed(root: Path, pairs: int, steps: int) -> list[dict]:
    """Cases the simulator says the slack absorbs (or nearly): the measured growth must stay within 1%."""
    rows = []
    for family, text in ABSORBED:
        a_runs, b_runs = [], []
        for k in range(pairs):
            a_runs.append(launch(root, f"abs-{family}-A{k}", family, 4, (), steps, LIGHT_LAST))
            b_runs.append(launch(root, f"abs-{family}-B{k}", family, 4, (text,), steps, LIGHT_LAST))
        a = statistics.median(r["measured_ms"] for r in a_runs)
        b = statistics.median(r["measured_ms"] for r in b_runs)
        pa, pb = a_runs[0]["predicted_ms"], b_runs[0]["predicted_ms"]
        row = {"family": family, "inject": text, "predicted_growth": pb / pa - 1, "measured_growth": b / a - 1}
        row.update(uniform_ms=a, measured_ms=b, predicted_ms=pb)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def kendall_tau(x: list[float], y: list[float]) -> float:
    pairs = [(i, j) for i in range(len(x)) for j in range(i + 1, len(x))]
    score = sum((x[i] - x[j]) * (y[i] - y[j]) > 0 for i, j in pairs) - sum(
        (x[i] - x[j]) * (y[i] - y[j]) < 0 for i, j in pairs
    )
    return score / len(pairs) if pairs else float("nan")


def ranking(rows: list[dict]) -> dict:
    families = sorted({r["family"] for r in rows})
    predicted = [statistics.mean(r["predicted_growth"] for r in rows if r["family"] == f) for f in families]
    measured = [statistics.mean(r["measured_growth"] for r in rows if r["family"] == f) for f in families]
    return {
        "families": families,
        "predicted": predicted,
        "measured": measured,
        "kendall_tau": kendall_tau(predicted, measured),
    }


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
    """The executor's Transformer on 2 CPU ranks, profiled, uniform (A) and with rank 1 1.3x slower (B), A B A B:
    each run's prediction (its own profile, the injection priced in) against its measured median."""
    rows = []
    for k in range(pairs):
        for label, inject in (("A", ()), ("B", ("slow-rank=1:1.3",))):
            config = run_config(
                schedule="1f1b", num_ranks=2, num_microbatches=4, steps=steps, profile=True, device="cpu",
                inject=inject, timeout_s=600,
            )  # fmt: skip
            result = run(config, runs_root=root, name=f"real-{label}{k}")
            if result.status != "ok":
                raise RuntimeError(f"real-{label}{k}: {result.status}: {result.message}")
            spread = (result.analysis or {}).get("spread") or {}
            row = {
                "run": f"{label}{k}",
                "measured_ms": result.measured_step_ms,
                "predicted_ms": result.predicted_step_ms,
                "error": result.prediction_error,
                "cv": spread.get("step_cv"),
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


def summary(rows: list[dict]) -> dict:
    def quantiles(key: str) -> dict:
        values = sorted(abs(r[key]) for r in rows)
        return {"median": statistics.median(values), "p90": values[min(len(values) - 1, int(0.9 * len(values)))]}

    absorbed = [r for r in rows if r["predicted_growth"] < 0.005]
    return {
        "cases": len(rows),
        "step_error": quantiles("step_error"),
        "paired_error": quantiles("paired_error"),
        "growth_error": quantiles("growth_error"),
        "absorbed_cases": [{k: r[k] for k in ("family", "ranks", "case", "measured_growth")} for r in absorbed],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 ranks, 3 families, one pair per case, 4 + 1 trials")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--ranks", type=lambda t: tuple(int(x) for x in t.split(",")), help="instead of the sizes")
    parser.add_argument("--families", type=lambda t: tuple(t.split(",")), help="instead of the mode's families")
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--skip-what-if", action="store_true")
    parser.add_argument("--skip-localisation", action="store_true")
    parser.add_argument("--sleep-precision", type=int, default=0, metavar="N", help="N sleeps per duration, first")
    parser.add_argument("--absorbed", type=int, default=0, metavar="PAIRS", help="also the slack-absorbed cases")
    parser.add_argument("--real", type=int, default=0, metavar="PAIRS", help="also the Transformer on 2 ranks")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    families = args.families or (QUICK_FAMILIES if args.quick else FAMILIES)
    sizes = args.ranks or ((4,) if args.quick else (4, 8))
    out: dict = {"quick": args.quick, "load_before": os.getloadavg()[0]}
    if args.sleep_precision:
        out["sleep_precision"] = sleep_precision(args.sleep_precision)
    with tempfile.TemporaryDirectory(prefix="bench-stragglers-") as tmp:
        root = Path(tmp)
        if not args.skip_what_if:
            rows = what_if(root, families, sizes, args.quick, args.steps)
            out.update(rows=rows, summary=summary(rows), ranking=ranking(rows))
            print(json.dumps({"summary": out["summary"], "ranking": out["ranking"]}, indent=1), flush=True)
        if not args.skip_localisation:
            trials, clean = (4, 1) if args.quick else (20, 5)
            out["localisation"] = localisation(root, trials, clean, families, 4, args.steps, args.seed)
            print(json.dumps({k: v for k, v in out["localisation"].items() if k != "rows"}), flush=True)
        if args.absorbed:
            out["absorbed"] = absorbed(root, args.absorbed, args.steps)
        if args.real:
            out["real_compute"] = real_compute(root, args.real, args.steps)
    out["load_after"] = os.getloadavg()[0]
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
