"""The arithmetic of a verification (pipesim_executor.host.verify): predicted against measured step time and peak
memory per candidate; each candidate's measured median with its 95% confidence interval (a bootstrap over its
steps and rounds, pipesim.analysis.stats); which candidates the measurement cannot tell apart (overlapping
intervals, in groups); the rank correlation and the recommended candidate's gap to the measured best over the
pairs it can tell apart; the tie rule on the predictions. Pure Python and numpy, so the app and the tests use it on
results from anywhere.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pipesim.analysis.attribution import coefficient_of_variation, reliable
from pipesim.analysis.machine_share import contended, load_words
from pipesim.analysis.round_effect import RoundEffect, round_effect
from pipesim.analysis.since_profile import SinceProfile
from pipesim.analysis.stats import (
    MAX_INFORMATIVE_HALF_WIDTH,
    MedianCI,
    RoundSpread,
    group_ranks,
    indistinguishable_groups,
    informative,
    median_ci,
    pooled_round_spread,
)
from pipesim.io.launch_history import relative_sd

DEFAULT_UNCERTAINTY = 0.01  # plans written before they carried their own (pipesim.plan.inputs.TIE)


@dataclass
class VerifyRow:
    """One candidate: what the plan predicted and what the run measured (None when it failed: `error` says why)."""

    label: str
    candidate: dict[str, Any]
    predicted_ms: float
    measured_ms: float | None = None
    run_dir: str | None = None
    error: str | None = None
    measured_cv: float | None = None  # stdev / mean of each run's steps, the median over its rounds
    predicted_memory_bytes: list[float] = field(default_factory=list)  # per rank
    measured_memory_bytes: list[float] = field(default_factory=list)  # per rank
    memory_kind: str | None = None
    predicted_p05_ms: float | None = None  # the plan's 90% interval; the point prediction when it gave none
    predicted_p95_ms: float | None = None
    has_predicted_interval: bool = False
    extrapolated: bool = False  # the plan priced it at a size outside its profile
    round_step_times_ms: list[list[float]] = field(default_factory=list)  # one list per round (run)
    run_dirs: list[str] = field(default_factory=list)  # one per round
    measured_ci_low_ms: float | None = None  # the 95% confidence interval of measured_ms
    measured_ci_high_ms: float | None = None

    def add_round(self, step_times_ms: list[float], run_dir: str) -> None:
        """One more run's steps: the pooled median, its interval and the within-run noise, recomputed."""
        self.round_step_times_ms.append([float(t) for t in step_times_ms])
        self.run_dirs.append(run_dir)
        self.run_dir = run_dir
        ci = median_ci(self.round_step_times_ms)
        self.measured_ms, self.measured_ci_low_ms, self.measured_ci_high_ms = ci.median, ci.low, ci.high
        cvs = [cv for cv in map(coefficient_of_variation, self.round_step_times_ms) if cv is not None]
        self.measured_cv = statistics.median(cvs) if cvs else None

    @property
    def measured_ci(self) -> MedianCI | None:
        if self.measured_ms is None or self.measured_ci_low_ms is None or self.measured_ci_high_ms is None:
            return None
        return MedianCI(self.measured_ms, self.measured_ci_low_ms, self.measured_ci_high_ms)

    @property
    def noisy(self) -> bool | None:
        """The Run page's too-noisy rule (pipesim.analysis.attribution.reliable) on the runs' own step CV."""
        return None if self.measured_cv is None else not reliable(self.measured_cv)

    @property
    def inside_predicted_interval(self) -> bool | None:
        """Whether the measured median lies inside the plan's 90% interval (None without one or a measurement)."""
        if self.measured_ms is None or not self.has_predicted_interval:
            return None
        return self.predicted_p05_ms <= self.measured_ms <= self.predicted_p95_ms

    @property
    def informative(self) -> bool | None:
        """Whether the plan's 90% interval is narrow enough to count (pipesim.analysis.stats.informative); None
        without one. A median inside an interval wider than that is not a hit."""
        if not self.has_predicted_interval:
            return None
        return informative(self.predicted_ms, self.predicted_p05_ms, self.predicted_p95_ms)

    @property
    def hit(self) -> bool | None:
        """Inside an informative interval (None: no interval, or one too wide to count, or nothing measured)."""
        inside = self.inside_predicted_interval
        return None if inside is None or not self.informative else inside

    @property
    def error_fraction(self) -> float | None:
        """(predicted - measured) / measured step time."""
        return None if self.measured_ms is None else self.predicted_ms / self.measured_ms - 1

    @property
    def memory_error(self) -> float | None:
        """The largest per-rank (predicted - measured) / measured peak memory."""
        pairs = list(zip(self.predicted_memory_bytes, self.measured_memory_bytes, strict=False))
        if not pairs or len(self.predicted_memory_bytes) != len(self.measured_memory_bytes):
            return None
        return max((p / m - 1 for p, m in pairs if m > 0), key=abs, default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "error_fraction": self.error_fraction,
            "memory_error": self.memory_error,
            "noisy": self.noisy,
            "inside_predicted_interval": self.inside_predicted_interval,
            "informative": self.informative,
        }

    def error_without(self, move: float) -> float | None:
        """The error with the machine's move since the profile taken out: the prediction scaled by `move` (the
        runs over the profile's own steps of the same configurations) against the measured median."""
        return None if self.measured_ms is None else self.predicted_ms * move / self.measured_ms - 1


@dataclass
class Verification:
    rows: list[VerifyRow]
    spearman: float | None  # over the distinguishable pairs; None with < 2 of them or when the predictions tie
    recommended_gap: float | None  # measured(recommended) / measured best - 1
    measured_best: str | None
    notes: list[str] = field(default_factory=list)
    uncertainty: float = DEFAULT_UNCERTAINTY
    predictions_tie: bool = False  # the predictions are within their uncertainty: the model ranks none
    indistinguishable: list[list[str]] = field(default_factory=list)  # groups the measurement cannot order
    recommended_indistinguishable: bool = False  # the recommendation's interval overlaps the measured best's
    rounds: int = 1
    # a plan priced from a profile: the runs against the profile's own in-situ steps of the same configurations
    since_profile: SinceProfile | None = None
    # whether the machine's speed changed between this verification's own rounds (pipesim.analysis.round_effect)
    round_effect: RoundEffect | None = None
    # what else used the machine while the runs ran (pipesim_executor.host.machine_load's record; None: not read)
    machine_load: dict[str, Any] | None = None
    # how far each candidate's round medians sat from its own level, pooled (what plan's intervals read back)
    launch_spread: RoundSpread | None = None

    @property
    def not_comparable_because(self) -> list[str]:
        """Why the measurement cannot be set against the predictions: "rounds_moved" (the machine's speed changed
        between the rounds), "machine_shared" (the ranks waited for cores that other work held:
        pipesim.analysis.machine_share.contended). Empty: comparable."""
        moved = self.round_effect is not None and self.round_effect.moved
        return ["rounds_moved"] * moved + ["machine_shared"] * contended(self.machine_load)

    @property
    def status(self) -> str:
        """ "ok", or "not_comparable" when the machine's speed changed during the verification or other work held
        the cores its ranks needed: its errors, groups and gaps then describe the machine, not the model."""
        return "not_comparable" if self.not_comparable_because else "ok"

    def verdict_lines(self) -> list[str]:
        """Each reason the verification is not comparable, in one line (none when it is comparable)."""
        because = self.not_comparable_because
        lines = [self.round_effect.line()] if "rounds_moved" in because and self.round_effect is not None else []
        if "machine_shared" in because:
            lines.append(
                "not comparable: other work shared the machine with this verification, so its ranks waited for "
                f"cores ({load_words(self.machine_load)}): its errors and groups say what the machine did, not the "
                "model; verify again on a quieter machine"
            )
        return lines

    @property
    def move(self) -> float | None:
        """The machine's measured move since the profile (its 95% interval excludes 1), else None."""
        since = self.since_profile
        return since.ratio if since is not None and since.moved else None

    def to_dict(self) -> dict[str, Any]:
        done = [r for r in self.rows if r.measured_ms is not None]
        errors = [abs(r.error_fraction) for r in done]
        memory = [abs(r.memory_error) for r in done if r.memory_error is not None]
        hits = [r.hit for r in done if r.hit is not None]  # informative intervals only
        move = self.move
        without = [abs(r.error_without(move)) for r in done] if move is not None else []
        return {
            "status": self.status,
            "not_comparable_because": self.not_comparable_because,
            "round_effect": None if self.round_effect is None else self.round_effect.to_dict(),
            "machine_load": self.machine_load,
            "candidates": [
                {**r.to_dict(), "error_move_removed": None if move is None else r.error_without(move)}
                for r in self.rows
            ],
            "spearman": self.spearman,
            "recommended_gap": self.recommended_gap,
            "recommended_indistinguishable": self.recommended_indistinguishable,
            "measured_best": self.measured_best,
            "indistinguishable": self.indistinguishable,
            "predictions_tie": self.predictions_tie,
            "uncertainty": self.uncertainty,
            "rounds": self.rounds,
            "median_abs_error": statistics.median(errors) if errors else None,
            "max_abs_error": max(errors, default=None),
            "max_abs_memory_error": max(memory, default=None),
            "inside_predicted_interval_fraction": sum(hits) / len(hits) if hits else None,
            "informative_intervals": len(hits),
            "not_informative_intervals": sum(r.informative is False for r in done),
            "move_since_profile": move,
            "median_abs_error_move_removed": statistics.median(without) if without else None,
            "max_abs_error_move_removed": max(without, default=None),
            "since_profile": None if self.since_profile is None else self.since_profile.to_dict(),
            "launch_spread": None if self.launch_spread is None else asdict(self.launch_spread),
            "notes": self.notes,
        }


def ranks_of(values: list[float]) -> list[float]:
    """Ranks 1..n, ties sharing their mean rank (Spearman's convention)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation: Pearson's on the ranks; None with < 2 values or when one side is all ties."""
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    rx, ry = ranks_of(xs), ranks_of(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return None if vx == 0 or vy == 0 else cov / (vx * vy) ** 0.5


def indistinguishable(predicted: list[float], uncertainty: float) -> bool:
    """The tie rule: predictions whose spread (largest over smallest, less 1) is within `uncertainty` cannot be
    ranked by the model, and a rank correlation over them would rank the machine's noise."""
    return len(predicted) >= 2 and min(predicted) > 0 and max(predicted) / min(predicted) - 1 <= uncertainty


def measured_interval(row: VerifyRow) -> MedianCI:
    """A measured row's interval; a row measured without its steps (built by hand) is its median alone."""
    assert row.measured_ms is not None
    return row.measured_ci or MedianCI(row.measured_ms, row.measured_ms, row.measured_ms)


def compare(rows: list[VerifyRow], uncertainty: float = DEFAULT_UNCERTAINTY, rounds: int = 1) -> Verification:
    """Over the measured rows: the groups the measurement cannot order (overlapping 95% intervals); the rank
    correlation of the predictions with the measured order, candidates of one group sharing their rank (unless
    the predictions tie); the recommended (first) row's gap to the measured best, and whether the two are
    indistinguishable."""
    done = [r for r in rows if r.measured_ms is not None]
    pooled = pooled_round_spread([r.round_step_times_ms for r in done])
    for row in done:  # the candidates share their rounds: each interval on the spread pooled over all of them
        if len(row.round_step_times_ms) >= 2:
            ci = median_ci(row.round_step_times_ms, pooled=pooled)
            row.measured_ms, row.measured_ci_low_ms, row.measured_ci_high_ms = ci.median, ci.low, ci.high
    notes = [f"{r.label}: {r.error}" for r in rows if r.error]
    predicted = [r.predicted_ms for r in done]
    effect = round_effect([r.round_step_times_ms for r in done])
    intervals = _ordering_intervals(done, effect, notes)
    groups = [[done[i].label for i in g] for g in indistinguishable_groups(intervals) if len(g) > 1]
    tie = indistinguishable(predicted, uncertainty)
    rho = None if tie else spearman(predicted, group_ranks(intervals))
    if tie:
        spread = max(predicted) / min(predicted) - 1
        notes.append(
            f"the predictions differ by at most {spread:.2%}, within their uncertainty of {uncertainty:.1%}: the "
            "candidates are indistinguishable to the model, so no rank correlation is given (it would rank noise)"
        )
    noisy = [r.label for r in done if r.noisy]
    if noisy:
        notes.append(
            f"too noisy (step times vary more than the Run page's threshold): {', '.join(noisy)}; the machine, not "
            "the model, decides their figures: verify again on a quieter machine"
        )
    if not done:
        return Verification(rows, rho, None, None, notes + ["no candidate was measured"], uncertainty, tie, groups)
    best = min(done, key=lambda r: r.measured_ms)
    gap, same = None, False
    if rows[0].measured_ms is not None:
        gap = rows[0].measured_ms / best.measured_ms - 1
        same = best is rows[0] or intervals[done.index(rows[0])].overlaps(intervals[done.index(best)])
        if best is not rows[0] and indistinguishable([rows[0].predicted_ms, best.predicted_ms], uncertainty):
            notes.append(
                f"the recommended candidate and the measured best ({best.label}) were predicted within "
                f"{uncertainty:.1%} of each other: a tie to the model"
            )
    else:
        notes.append("the recommended candidate did not run: no gap to the measured best")
    verification = Verification(rows, rho, gap, best.label, notes, uncertainty, tie, groups, same, rounds)
    verification.round_effect = effect
    verification.launch_spread = pooled
    return verification


def _ordering_intervals(done: list[VerifyRow], effect: RoundEffect | None, notes: list[str]) -> list[MedianCI]:
    """The intervals that order the candidates (groups, Spearman, the recommendation's tie): each row's own, or,
    when the rounds moved together significantly, intervals over its steps with the rounds' shared move divided
    out. Candidates measured in the same rounds share the machine's move, so their differences do not carry it:
    a gap only that drift hid is then told apart (the reported 95% CIs, set against the predictions, keep it)."""
    own = [measured_interval(r) for r in done]
    if effect is None or not effect.significant or effect.candidates < 2:
        return own
    count = len(effect.round_ratios)
    steady = [
        [[t / ratio for t in steps] for steps, ratio in zip(r.round_step_times_ms, effect.round_ratios, strict=True)]
        if len(r.round_step_times_ms) == count and all(r.round_step_times_ms)
        else None
        for r in done
    ]
    pooled = pooled_round_spread([rounds for rounds in steady if rounds is not None])
    notes.append(
        f"the rounds moved together ({effect.medians_text()}): the candidates are ordered and grouped with that "
        "shared move divided out of their steps"
    )
    return [own[i] if rounds is None else median_ci(rounds, pooled=pooled) for i, rounds in enumerate(steady)]


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"{low:.2f}-{high:.2f}"


def summary_lines(v: Verification) -> list[str]:
    """The table a verification prints: per candidate the predicted point and 90% interval, the measured median and
    its 95% interval, the error, the runs' noise and the memory error; then the figures over all of them. A
    verification whose rounds moved says so first, and then claims no group, no tie and no steadiness."""
    comparable = v.status == "ok"
    lines = v.verdict_lines()
    lines.append(
        f"{'candidate':36} {'predicted ms':>12} {'90% interval':>15} {'measured ms':>11} {'95% CI':>15} "
        f"{'error':>7} {'cv':>6} {'memory':>7}"
    )
    grouped = {label: n for n, group in enumerate(v.indistinguishable, start=1) for label in group}
    for r in v.rows:
        measured = "-" if r.measured_ms is None else f"{r.measured_ms:.2f}"
        error = "-" if r.error_fraction is None else f"{r.error_fraction:+.1%}"
        cv = "-" if r.measured_cv is None else f"{r.measured_cv:.1%}"
        memory = "-" if r.memory_error is None else f"{r.memory_error:+.1%}"
        predicted = _interval(r.predicted_p05_ms, r.predicted_p95_ms) if r.has_predicted_interval else "none"
        marks = [f"group {grouped[r.label]}"] if r.label in grouped and comparable else []
        marks += ["interval not informative"] if r.informative is False else []
        marks += ["extrapolated"] if r.extrapolated else []
        marks += ["too noisy"] if r.noisy else []
        marks += [r.error] if r.error else []
        lines.append(
            f"{r.label[:36]:36} {r.predicted_ms:12.2f} {predicted:>15} {measured:>11} "
            f"{_interval(r.measured_ci_low_ms, r.measured_ci_high_ms):>15} {error:>7} {cv:>6} {memory:>7}"
            + (f"  ({'; '.join(marks)})" if marks else "")
        )
    summary = v.to_dict()
    lines.append(
        f"measured in {v.rounds} interleaved round(s); "
        "95% CI: bootstrap over steps and rounds, at least Student's t over the round medians (their spread pooled "
        "over every candidate)"
    )
    if comparable and v.round_effect is not None:
        lines.append(v.round_effect.line())
    if comparable and v.launch_spread is not None:
        spread = v.launch_spread
        lines.append(
            f"launch spread: a candidate's rounds sat {relative_sd(spread.log_sd):.1%} apart (one "
            f"standard deviation, {spread.dof} degrees of freedom): what plan's intervals read from the machine's "
            "launch history"
        )
    if summary["median_abs_error"] is not None:
        lines.append(
            f"prediction error: median |error| {summary['median_abs_error']:.1%}, "
            f"largest {summary['max_abs_error']:.1%}"
            + (
                ""
                if summary["max_abs_memory_error"] is None
                else f"; peak memory per rank within {summary['max_abs_memory_error']:.1%}"
            )
        )
    if summary["median_abs_error_move_removed"] is not None:
        lines.append(
            f"with the machine's move since the profile ({summary['move_since_profile']:.3f}x) taken out: median "
            f"|error| {summary['median_abs_error_move_removed']:.1%}, largest "
            f"{summary['max_abs_error_move_removed']:.1%} (the model's part; the rest is the machine's)"
        )
    lines += coverage_lines(summary)
    if comparable:
        for n, group in enumerate(v.indistinguishable, start=1):
            lines.append(f"indistinguishable (group {n}, overlapping 95% CIs): {', '.join(group)}")
    if v.predictions_tie:
        lines.append("Spearman rank correlation: none (the predictions are indistinguishable; see the note)")
    elif comparable:
        rho = "-" if v.spearman is None else f"{v.spearman:+.2f}"
        lines.append(f"Spearman rank correlation (predicted vs measured order, over distinguishable pairs): {rho}")
    gap = "-" if v.recommended_gap is None else f"{v.recommended_gap:+.1%}"
    same = " (indistinguishable from it)" if v.recommended_indistinguishable and v.recommended_gap else ""
    same = (
        same
        if comparable
        else " (not comparable: "
        + ("the rounds moved)" if "rounds_moved" in v.not_comparable_because else "other work shared the machine)")
    )
    lines.append(f"recommended candidate vs the measured best ({v.measured_best}): {gap}{same}")
    if v.since_profile is not None:
        lines.append(v.since_profile.line(rounds_moved="rounds_moved" in v.not_comparable_because))
    return lines + [f"note: {n}" for n in v.notes]


def coverage_lines(summary: dict[str, Any]) -> list[str]:
    """How many measured medians lie inside their predicted 90% interval, over the informative intervals only."""
    informative, wide = summary["informative_intervals"], summary["not_informative_intervals"]
    bound = f"wider than +-{MAX_INFORMATIVE_HALF_WIDTH:.0%}"
    if not informative and wide:
        return [f"no informative interval: all {wide} predicted 90% intervals are {bound}, so none counts as a hit"]
    if not informative:
        return []
    line = (
        f"measured median inside the predicted 90% interval: {summary['inside_predicted_interval_fraction']:.0%} "
        f"of {informative} informative interval{'s' if informative > 1 else ''}"
    )
    return [line + (f"; {wide} not informative ({bound}), not counted" if wide else "")]
