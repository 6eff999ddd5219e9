"""Blind localisation for bench/bench_stragglers.py: trials with a random rank (a random kind of its actions, factor
in [1.15, 1.5]) or link (1 to 5 ms), drawn here and kept from the analysis until scoring, plus trials with no
injection; `find_stragglers` reads only the run folder (every step injected there), then the truth scores it.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stragglers_launch import launch  # noqa: E402

from pipesim.analysis.stragglers import find_stragglers  # noqa: E402
from pipesim.io.run_record import read_run  # noqa: E402
from pipesim.schedules import schedule_info  # noqa: E402


def kinds_of(family: str) -> str:
    return "FIW" if schedule_info(family).split_backward else "FB"


def draw_truth(rng: random.Random, kind: str | None, families: tuple[str, ...], ranks: int) -> tuple[dict, tuple]:
    """One trial's hidden truth and its --inject text: a slow rank 3 times in 4, a delayed link otherwise, nothing
    for a clean trial (`kind` None)."""
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
    return truth, inject


def score(truth: dict, found: dict) -> tuple[bool, float | None]:
    """Whether the analysis named exactly the injected rank or link (or nothing, for a clean trial), and its
    estimate's error (factor, or ms for a link) when it did."""
    reported_ranks = [s["rank"] for s in found["stragglers"]]
    reported_links = [[k["src"], k["dst"]] for k in found["links"]]
    if "rank" in truth:
        right = reported_ranks == [truth["rank"]] and not reported_links
        return right, abs(found["stragglers"][0]["factor"] - truth["factor"]) if right else None
    if "link" in truth:
        right = reported_links == [truth["link"]] and not reported_ranks
        return right, abs(found["links"][0]["delay_ms"] - truth["ms"]) if right else None
    return not reported_ranks and not reported_links, None


def localisation(
    root: Path, trials: int, clean: int, families: tuple[str, ...], ranks: int, steps: int, seed: int
) -> dict:
    """`trials` injected and `clean` uninjected runs in a seeded random order: how many were named right, the
    median factor error of the slow ranks found, and the false alarms."""
    rng = random.Random(seed)
    rows = []
    plan = [None] * clean + ["trial"] * trials
    rng.shuffle(plan)
    for n, kind in enumerate(plan):
        truth, inject = draw_truth(rng, kind, families, ranks)
        out = launch(root, f"blind-{n}", truth["family"], ranks, inject, steps)
        record = read_run(out["dir"])  # the analysis sees the run folder, not the truth
        found = find_stragglers(record.schedule, record.outputs.measured, record.outputs.cost).to_dict()
        right, err = score(truth, found)
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
