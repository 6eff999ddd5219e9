"""The statistics of bench/bench_stragglers.py: a case's figures with their bootstrap CIs, when a case has run enough
pairs, the families' ranking with each family's CI, and the markdown table.

A case's pairs are A B: the uniform steps and the injected ones. Within one launch that alternates them
(`--inject-steps alternate`, `step_pairs`) a pair is one uniform step and the injected step right after it, each
pair a "run" of one step; launches of separate A and B runs pair whole runs. A case runs until its CIs are tight:
the growth's and the step error's 95% bootstrap half-widths both at most `target`. The bootstrap resamples the
pairs (each A with its B) first, then each run's steps: a drift both halves of a pair share cancels in their
ratio, and pairs that disagree widen the interval, as they should.
"""

from __future__ import annotations

import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.analysis.stats import median_ci  # noqa: E402

RESAMPLES = 400
TOLERANCE = 0.05  # the bar for a real-compute prediction: within 5%, or inside the measured median's CI


def _steps_median(runs: Sequence[Sequence[float]], rng: random.Random) -> float:
    """The pooled median of `runs` with each run's steps resampled."""
    return statistics.median(rng.choice(steps) for steps in runs for _ in steps)


def _resampled_median(runs: Sequence[Sequence[float]], rng: random.Random) -> float:
    """One bootstrap draw of the pooled median: runs resampled (when there are several), then steps in each."""
    return _steps_median([rng.choice(runs) for _ in runs] if len(runs) > 1 else runs, rng)


def ratio_ci(num: Sequence[Sequence[float]], den: Sequence[Sequence[float]], seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of median(num) / median(den) - 1, each a list of runs' step times (pairs resampled
    together: the k-th num run with the k-th den run)."""
    rng = random.Random(seed)
    draws = []
    pairs = list(zip(num, den, strict=True))
    for _ in range(RESAMPLES):
        chosen = [rng.choice(pairs) for _ in pairs] if len(pairs) > 1 else pairs
        draws.append(_steps_median([c[0] for c in chosen], rng) / _steps_median([c[1] for c in chosen], rng) - 1)
    draws.sort()
    return draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]


def error_ci(predicted: float, runs: Sequence[Sequence[float]], seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of predicted / median(runs' steps) - 1 (the prediction held fixed)."""
    rng = random.Random(seed)
    draws = sorted(predicted / _resampled_median(runs, rng) - 1 for _ in range(RESAMPLES))
    return draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]


def pooled_median(runs: Sequence[Sequence[float]]) -> float:
    return statistics.median(t for steps in runs for t in steps)


def case_row(a_runs: list[dict], b_runs: list[dict]) -> dict:
    """A case's figures from its A and B runs (each: steps_ms, predicted_ms): the step error of B's prediction, the
    growth predicted (the runs' own predictions, B over A) and measured (pooled medians), each with its CI."""
    a_steps, b_steps = [r["steps_ms"] for r in a_runs], [r["steps_ms"] for r in b_runs]
    a, b = pooled_median(a_steps), pooled_median(b_steps)
    pa = statistics.median(r["predicted_ms"] for r in a_runs)
    pb = statistics.median(r["predicted_ms"] for r in b_runs)
    growth_low, growth_high = ratio_ci(b_steps, a_steps)
    error_low, error_high = error_ci(pb, b_steps)
    return {
        "pairs": len(a_runs),
        "uniform_ms": a,
        "measured_ms": b,
        "predicted_uniform_ms": pa,
        "predicted_ms": pb,
        "step_error": pb / b - 1,
        "step_error_ci": [error_low, error_high],
        "uniform_error": pa / a - 1,
        "predicted_growth": pb / pa - 1,
        "measured_growth": b / a - 1,
        "measured_growth_ci": [growth_low, growth_high],
        "growth_error": (pb / pa) / (b / a) - 1,
    }


def step_pairs(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """The A and B halves of launches whose steps alternated (each: steps_ms, injected, predicted_ms,
    predicted_uniform_ms): every injected step paired with the uniform step right before it, as one-step runs that
    `case_row` reads (each carries its launch's predictions). A step with no uniform step before it is left out."""
    a_runs, b_runs = [], []
    for run in runs:
        steps, flags = run["steps_ms"], run["injected"]
        if len(steps) != len(flags):
            raise ValueError(f"{len(steps)} step times but {len(flags)} injected_steps flags")
        for i in range(1, len(steps)):
            if flags[i] and not flags[i - 1]:
                a_runs.append({"steps_ms": [steps[i - 1]], "predicted_ms": run["predicted_uniform_ms"]})
                b_runs.append({"steps_ms": [steps[i]], "predicted_ms": run["predicted_ms"]})
    if not a_runs:
        raise ValueError("no injected step follows a uniform one: the launches did not alternate")
    return a_runs, b_runs


def tight(row: dict, target: float) -> bool:
    """Both CIs' half-widths at most `target` (a fraction)."""
    return all((high - low) / 2 <= target for low, high in (row["measured_growth_ci"], row["step_error_ci"]))


def kendall_tau(x: list[float], y: list[float]) -> float:
    """Tau-a: concordant minus discordant pairs over all pairs (a tie counts as neither)."""
    pairs = [(i, j) for i in range(len(x)) for j in range(i + 1, len(x))]
    score = sum((x[i] - x[j]) * (y[i] - y[j]) > 0 for i, j in pairs) - sum(
        (x[i] - x[j]) * (y[i] - y[j]) < 0 for i, j in pairs
    )
    return score / len(pairs) if pairs else float("nan")


def ranking(rows: list[dict]) -> dict:
    """The families by mean growth over their cases, predicted against measured (tau), with each family's
    measured mean's interval (the mean of its cases' CI ends: how far apart two families must be to rank)."""
    families = sorted({r["family"] for r in rows})
    cases = [{(r["ranks"], r["case"]) for r in rows if r["family"] == f} for f in families]
    common = set.intersection(*cases) if cases else set()  # a run cut short: only the cases every family ran
    mine = {f: [r for r in rows if r["family"] == f and (r["ranks"], r["case"]) in common] for f in families}
    predicted = [statistics.mean(r["predicted_growth"] for r in mine[f]) for f in families]
    measured = [statistics.mean(r["measured_growth"] for r in mine[f]) for f in families]
    cis = [
        [
            statistics.mean(r["measured_growth_ci"][0] for r in mine[f]),
            statistics.mean(r["measured_growth_ci"][1] for r in mine[f]),
        ]
        for f in families
    ]
    return {
        "families": families,
        "cases": len(common),
        "predicted": predicted,
        "measured": measured,
        "measured_ci": cis,
        "kendall_tau": kendall_tau(predicted, measured),
    }


def summary(rows: list[dict]) -> dict:
    def quantiles(key: str) -> dict:
        values = sorted(abs(r[key]) for r in rows)
        return {"median": statistics.median(values), "p90": values[min(len(values) - 1, int(0.9 * len(values)))]}

    return {
        "cases": len(rows),
        "step_error": quantiles("step_error"),
        "uniform_error": quantiles("uniform_error"),
        "growth_error": quantiles("growth_error"),
    }


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def table(rows: list[dict]) -> str:
    """The cases as a markdown table, each figure with its 95% CI."""
    lines = [
        "| family | P | case | pairs | load | uniform ms | injected ms | predicted ms | step error [CI] "
        "| predicted growth | measured growth [CI] |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        el, eh = r["step_error_ci"]
        gl, gh = r["measured_growth_ci"]
        lines.append(
            f"| {r['family']} | {r['ranks']} | {r['case']} | {r['pairs']} | {r['load']:.1f} | {r['uniform_ms']:.1f} "
            f"| {r['measured_ms']:.1f} | {r['predicted_ms']:.1f} | {pct(r['step_error'])} [{pct(el)}, {pct(eh)}] "
            f"| {pct(r['predicted_growth'])} | {pct(r['measured_growth'])} [{pct(gl)}, {pct(gh)}] |"
        )
    return "\n".join(lines)


def real_row(rounds: Sequence[Sequence[float]], predictions: Mapping[str, float], seed: int = 0) -> dict:
    """The injected steps of real-compute launches (`rounds`: each launch's injected step times) against
    predictions of them: the measured median with its 95% CI (pipesim.analysis.stats.median_ci: steps resampled,
    and across launches widened to the launches' disagreement), and per prediction its error, the error's CI (the
    prediction over the CI's ends) and whether it passes: within TOLERANCE, or inside the CI."""
    ci = median_ci(rounds, seed=seed)
    row: dict = {"measured_ms": ci.median, "measured_ci": [ci.low, ci.high], "steps": sum(len(r) for r in rounds)}
    for name, predicted in predictions.items():
        error = predicted / ci.median - 1
        row[name] = {
            "predicted_ms": predicted,
            "error": error,
            "error_ci": [predicted / ci.high - 1, predicted / ci.low - 1],
            "within_5pct": abs(error) <= TOLERANCE,
            "inside_ci": ci.contains(predicted),
            "passes": abs(error) <= TOLERANCE or ci.contains(predicted),
        }
    return row


def real_verdict(rows: Sequence[Mapping], names: Sequence[str]) -> dict:
    """Per prediction: how many rows pass, of how many, and whether every one does (the issue's Done-when)."""
    return {
        name: {
            "passes": sum(r[name]["passes"] for r in rows),
            "of": len(rows),
            "all": all(r[name]["passes"] for r in rows),
        }
        for name in names
    }


def real_headline(verdict: Mapping) -> str:
    """The real-compute verdict in one line, headlined by the profile's own prediction (`own`: what a user gets
    from a profile and the what-if); `anchored` is half measurement (the measured uniform steps times the
    predicted growth) and is reported after it, never in its place."""
    own = verdict["own"]
    rest = ", ".join(f"{name} {v['passes']}/{v['of']}" for name, v in verdict.items() if name != "own")
    return (
        f"real compute: the profile's own prediction passes {own['passes']}/{own['of']} pairs (within 5% or inside "
        f"the measured 95% CI); {rest} (anchored: the measured uniform steps times the predicted growth, half "
        "measurement)"
    )


def real_summary(rows: Sequence[Mapping], names: Sequence[str]) -> list[dict]:
    """Per case (rows' "case", in order of appearance): its pairs, mean load, median measured growth, and per
    prediction the median error and median |error| over the pairs and how many pass."""
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case]
        entry: dict = {
            "case": case,
            "pairs": len(mine),
            "load": statistics.mean(r["load"] for r in mine),
            "measured_growth": statistics.median(r["measured_growth"] for r in mine),
        }
        for name in names:
            errors = [r[name]["error"] for r in mine]
            entry[name] = {
                "median_error": statistics.median(errors),
                "median_abs_error": statistics.median(abs(e) for e in errors),
                "growth": statistics.median(r[name]["growth"] for r in mine),
                "passes": sum(r[name]["passes"] for r in mine),
            }
        out.append(entry)
    return out


def real_summary_table(cases: Sequence[Mapping], names: Sequence[str]) -> str:
    """real_summary as a markdown table: per prediction its median error (median |error|) and the pairs passing."""
    head = "| case | pairs | load | measured growth | " + " | ".join(
        f"{name}: growth, error (abs) | pass" for name in names
    )
    lines = [head + " |", "|---" * (4 + 2 * len(names)) + "|"]
    for c in cases:
        cells = [str(c["case"]), str(c["pairs"]), f"{c['load']:.1f}", pct(c["measured_growth"])]
        for name in names:
            p = c[name]
            cells += [
                f"{pct(p['growth'])}, {pct(p['median_error'])} ({100 * p['median_abs_error']:.1f}%)",
                f"{p['passes']}/{c['pairs']}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def real_table(rows: Sequence[Mapping], names: Sequence[str]) -> str:
    """The real-compute rows (each with case, pair, load, uniform_ms, measured_growth, real_row's figures and each
    prediction's growth) as a markdown table: per prediction its step (its growth), its error [CI] and a verdict
    (5%: within 5%; CI: inside the measured CI; no: neither)."""
    head = "| case | pair | load | uniform ms | injected ms [95% CI] | growth | " + " | ".join(
        f"{name} ms (growth) | error [CI] | ok" for name in names
    )
    lines = [head + " |", "|---" * (6 + 3 * len(names)) + "|"]
    for r in rows:
        low, high = r["measured_ci"]
        cells = [str(r["case"]), str(r["pair"]), f"{r['load']:.1f}", f"{r['uniform_ms']:.1f}"]
        cells += [f"{r['measured_ms']:.1f} [{low:.1f}, {high:.1f}]", pct(r["measured_growth"])]
        for name in names:
            p = r[name]
            el, eh = p["error_ci"]
            ok = "5%" if p["within_5pct"] else "CI" if p["inside_ci"] else "no"
            cells += [f"{p['predicted_ms']:.1f} ({pct(p['growth'])})", f"{pct(p['error'])} [{pct(el)}, {pct(eh)}]", ok]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
