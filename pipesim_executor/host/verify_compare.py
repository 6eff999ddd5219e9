"""The arithmetic of a verification (pipesim_executor.host.verify): predicted against measured step time and peak
memory per
candidate, the rank correlation, the tie rule and the recommended candidate's gap to the measured best. Pure
Python, so the app and the tests use it on results from anywhere.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields
from typing import Any

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
    measured_cv: float | None = None  # stdev / mean of the measured steps
    predicted_memory_bytes: list[float] = field(default_factory=list)  # per rank
    measured_memory_bytes: list[float] = field(default_factory=list)  # per rank
    memory_kind: str | None = None

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
        }


@dataclass
class Verification:
    rows: list[VerifyRow]
    spearman: float | None  # None with fewer than 2 measured rows, or when the predictions are indistinguishable
    recommended_gap: float | None  # measured(recommended) / measured best - 1
    measured_best: str | None
    notes: list[str] = field(default_factory=list)
    uncertainty: float = DEFAULT_UNCERTAINTY
    indistinguishable: bool = False

    def to_dict(self) -> dict[str, Any]:
        done = [r for r in self.rows if r.measured_ms is not None]
        errors = [abs(r.error_fraction) for r in done]
        memory = [abs(r.memory_error) for r in done if r.memory_error is not None]
        return {
            "candidates": [r.to_dict() for r in self.rows],
            "spearman": self.spearman,
            "recommended_gap": self.recommended_gap,
            "measured_best": self.measured_best,
            "indistinguishable": self.indistinguishable,
            "uncertainty": self.uncertainty,
            "median_abs_error": statistics.median(errors) if errors else None,
            "max_abs_error": max(errors, default=None),
            "max_abs_memory_error": max(memory, default=None),
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


def compare(rows: list[VerifyRow], uncertainty: float = DEFAULT_UNCERTAINTY) -> Verification:
    """Rank correlation over the measured rows (unless the tie rule holds) and the gap of the recommended (first)
    row to the measured best."""
    done = [r for r in rows if r.measured_ms is not None]
    notes = [f"{r.label}: {r.error}" for r in rows if r.error]
    predicted = [r.predicted_ms for r in done]
    tie = indistinguishable(predicted, uncertainty)
    rho = None if tie else spearman(predicted, [r.measured_ms for r in done])
    if tie:
        spread = max(predicted) / min(predicted) - 1
        notes.append(
            f"the predictions differ by at most {spread:.2%}, within their uncertainty of {uncertainty:.1%}: the "
            "candidates are indistinguishable to the model, so no rank correlation is given (it would rank noise)"
        )
    if not done:
        return Verification(rows, rho, None, None, notes + ["no candidate was measured"], uncertainty, tie)
    best = min(done, key=lambda r: r.measured_ms)
    gap = None
    if rows[0].measured_ms is not None:
        gap = rows[0].measured_ms / best.measured_ms - 1
        if best is not rows[0] and indistinguishable([rows[0].predicted_ms, best.predicted_ms], uncertainty):
            notes.append(
                f"the recommended candidate and the measured best ({best.label}) were predicted within "
                f"{uncertainty:.1%} of each other: a tie to the model"
            )
    else:
        notes.append("the recommended candidate did not run: no gap to the measured best")
    return Verification(rows, rho, gap, best.label, notes, uncertainty, tie)


def summary_lines(v: Verification) -> list[str]:
    lines = [f"{'candidate':40} {'predicted ms':>12} {'measured ms':>12} {'error':>7} {'cv':>6} {'memory':>7}"]
    for r in v.rows:
        measured = "-" if r.measured_ms is None else f"{r.measured_ms:12.2f}"
        error = "-" if r.error_fraction is None else f"{r.error_fraction:+.1%}"
        cv = "-" if r.measured_cv is None else f"{r.measured_cv:.1%}"
        memory = "-" if r.memory_error is None else f"{r.memory_error:+.1%}"
        lines.append(
            f"{r.label[:40]:40} {r.predicted_ms:12.2f} {measured:>12} {error:>7} {cv:>6} {memory:>7}"
            + (f"  ({r.error})" if r.error else "")
        )
    summary = v.to_dict()
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
    if v.indistinguishable:
        lines.append("Spearman rank correlation: none (the predictions are indistinguishable; see the note)")
    else:
        rho = "-" if v.spearman is None else f"{v.spearman:+.2f}"
        lines.append(f"Spearman rank correlation (predicted vs measured order): {rho}")
    gap = "-" if v.recommended_gap is None else f"{v.recommended_gap:+.1%}"
    lines.append(f"recommended candidate vs the measured best ({v.measured_best}): {gap}")
    return lines + [f"note: {n}" for n in v.notes]
