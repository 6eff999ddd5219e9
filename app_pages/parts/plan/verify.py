"""The Plan page's Verify: the plan's top K candidates run for real in interleaved rounds, in the background, with
progress and Cancel; the page's one door to `pipesim_executor.host.verify` (its public `verify_plan`, `compare`).

A `VerifyJob` runs `verify.verify_plan` on a thread of the server, collecting each candidate's row as its runs end
(`on_row`, once per run: the row holds every round so far). Each job writes its plan to a file of its own
(plans_root()/plan-<signature>-<time>.json), and verify names every verification's run folders anew, so the same
plan can be verified again. Cancel is the launcher's own: the run going is
cancelled through its folder (`pipesim_executor.host.watch`, the `cancel` file), and the job stops before the next
candidate. Jobs are kept per server process (st.cache_resource), so a reload finds one still going.

Whether two candidates can be told apart is verify's to say: its tie rule on the predictions (`predictions_tie`),
and its groups of candidates whose measured 95% intervals overlap (`indistinguishable`), which the table greys out
(`verify_table`). A result without its own verdict falls back to predictions within `PREDICTION_TIE`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app_pages.parts import plot, widgets
from pipesim.charts import IntervalRow
from pipesim.charts import verify as charts_verify
from pipesim.units import MISSING, format_percent
from pipesim_executor.host import verify
from pipesim_executor.host.machine import MachineBusy

PREDICTION_TIE = 0.01  # relative: predictions closer than this rank no candidate above another


class _Cancelled(Exception):
    """Raised from `on_row` to end verify_plan's loop once the user cancelled."""


@dataclass
class VerifyJob:
    """One verification in progress or done: rows as they end, the comparison at the end."""

    plan_path: Path
    settings: Any  # verify.VerifySettings
    rows: list[Any] = field(default_factory=list)
    latest: Any = None  # verify.VerifyProgress, the last one reported
    result: Any = None  # pipesim_executor.host.verify.Verification
    error: str | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.time)
    _thread: threading.Thread | None = None

    def start(self) -> VerifyJob:
        self._thread = threading.Thread(target=self._run, name=f"verify {self.plan_path.stem}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.result = verify.verify_with(
                self.plan_path,
                self.settings,
                on_row=self._row,
                on_progress=self._progress,
                cancel=self.cancelled,  # verify cancels the running candidate's run and skips the rest
            )
        except _Cancelled:
            self.result = verify.compare(self.rows)
        except (ValueError, OSError, MachineBusy) as error:  # MachineBusy: another job holds the machine
            self.error = str(error).splitlines()[0]

    def _row(self, row: Any) -> None:
        if not any(row is kept for kept in self.rows):  # a row comes back once per round
            self.rows.append(row)
        if self.cancelled.is_set():
            raise _Cancelled

    def _progress(self, progress: Any) -> None:
        self.latest = progress

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def current_run(self) -> Any | None:
        """The candidate's run going now, followed from its folder (None between runs)."""
        from pipesim_executor.host import watch

        prefix = f"verify-{self.plan_path.stem}-"
        going = [run for run in watch.running_runs(self.settings.runs_root) if run.run_dir.name.startswith(prefix)]
        return going[0] if going else None

    def cancel(self) -> None:
        """Stop after the run going now, and cancel that run (the launcher's cancel, through its folder)."""
        self.cancelled.set()
        run = self.current_run()
        if run is not None:
            run.cancel()

    def progress(self) -> tuple[float, str]:
        """The share done (candidates ended, and the running one's progress) and a line saying where it is."""
        run = self.current_run()
        if run is not None and self.cancelled.is_set():  # a candidate started just as the user cancelled
            run.cancel()
        index = len(self.rows)
        within = float(run.progress) if run is not None else 0.0
        text = f"candidate {min(index + 1, self.settings.top)} of {self.settings.top}"
        if self.latest is not None:  # verify's own count: runs over every round
            text = f"run {min(self.latest.index + 1, self.latest.total)} of {self.latest.total}, {self.latest.text}"
        if run is not None:
            steps = [e for e in run.events() if e.get("event") == "step"]
            if steps:
                text += f": step {steps[-1].get('step', 0) + 1} of {steps[-1].get('steps', '?')}"
            else:
                text += ": starting"
        if self.latest is not None:
            return min(1.0, self.latest.fraction), text
        return min(1.0, (index + within) / max(self.settings.top, 1)), text


@st.cache_resource(show_spinner=False)
def _jobs() -> dict[str, VerifyJob]:
    return {}


def start(
    plan_path: Path, signature: str, top: int, steps: int, runs_root: Path, rounds: int = verify.DEFAULT_ROUNDS
) -> VerifyJob:
    """Start verifying the plan at `plan_path` (a file of its own), remembered under the plan's `signature`."""
    settings = verify.VerifySettings(top=top, steps=steps, runs_root=runs_root, rounds=rounds)
    job = VerifyJob(plan_path, settings).start()
    _jobs()[signature] = job
    return job


def job_for(signature: str) -> VerifyJob | None:
    """The latest job of the plan with `signature` in this server (a reload finds it), or None."""
    return _jobs().get(signature)


def noise_flag(measured_cv: float | None) -> str:
    """The Run page's noise flag for a candidate's run, in the same words: its step times' coefficient of
    variation against pipesim's threshold (pipesim.analysis.attribution.NOISY_STEP_CV, the Run page's `spread`)."""
    from pipesim.analysis import NOISY_STEP_CV
    from pipesim.units import format_percent

    if measured_cv is None:
        return ""
    if measured_cv > NOISY_STEP_CV:
        return f"too noisy ({format_percent(measured_cv)})"
    return f"steady ({format_percent(measured_cv)})"


def predictions_tie(result: Any) -> bool:
    """Whether the measured candidates' predictions are too close to rank one above another: verify's own verdict
    where it gives one, else predictions within PREDICTION_TIE of each other."""
    own = getattr(result, "predictions_tie", None)
    if isinstance(own, bool):
        return own
    predicted = [r.predicted_ms for r in result.rows if r.measured_ms is not None]
    if len(predicted) < 2:
        return False
    return max(predicted) - min(predicted) <= PREDICTION_TIE * min(predicted)


def _span(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f"{low:.2f} - {high:.2f}"


def verify_table(result: Any) -> tuple[list[dict[str, Any]], list[bool]]:
    """The Verify table's rows (the predicted point and 90% interval beside the measured median and its 95% CI)
    and, per row, whether to grey it out: the measurement cannot tell it from another candidate (its group)."""
    groups = {label: n for n, group in enumerate(getattr(result, "indistinguishable", []), start=1) for label in group}
    rows, grey = [], []
    for r in result.rows:
        interval = getattr(r, "has_predicted_interval", False)
        rows.append(
            {
                "candidate": r.label + (" (extrapolated)" if getattr(r, "extrapolated", False) else ""),
                "predicted": r.predicted_ms,
                "predicted 90%": (_span(r.predicted_p05_ms, r.predicted_p95_ms) if interval else "no interval")
                + (" (not informative)" if getattr(r, "informative", None) is False else ""),
                "measured": r.measured_ms,
                "measured 95% CI": _span(
                    getattr(r, "measured_ci_low_ms", None), getattr(r, "measured_ci_high_ms", None)
                ),
                "error": None if r.measured_ms is None else 100 * (r.predicted_ms / r.measured_ms - 1),
                "indistinguishable": f"group {groups[r.label]}" if r.label in groups else "",
                # the Run page's flag for the same run: step times' CV above pipesim's NOISY_STEP_CV
                "noise": noise_flag(getattr(r, "measured_cv", None)),
                "run": (r.run_dir or "").rsplit("/", 1)[-1],
                "why not measured": r.error or "",
            }
        )
        grey.append(r.label in groups)
    return rows, grey


def interval_rows(result: Any) -> list[IntervalRow]:
    """The verification as the intervals figure draws it (pipesim.charts.verify), greyed as the table is."""
    _, grey = verify_table(result)
    return [
        IntervalRow(
            r.label,
            r.predicted_ms,
            r.predicted_p05_ms if r.predicted_p05_ms is not None else r.predicted_ms,
            r.predicted_p95_ms if r.predicted_p95_ms is not None else r.predicted_ms,
            r.measured_ms,
            getattr(r, "measured_ci_low_ms", None),
            getattr(r, "measured_ci_high_ms", None),
            shaded,
        )
        for r, shaded in zip(result.rows, grey, strict=True)
    ]


def show_result(result: verify.Verification) -> None:
    """A finished verification: the table (a group the measurement cannot order greyed out), the rank correlation
    and the recommendation's gap, the intervals drawn side by side, the machine's move since the profile, notes."""
    rows, grey = verify_table(result)
    for line in result.verdict_lines():  # not comparable: the machine moved, or other work held its cores
        st.warning(line)
    moved = "rounds_moved" in result.not_comparable_because  # the machine's speed changed during the verification
    frame = pd.DataFrame(rows)
    st.dataframe(
        frame.style.apply(lambda row: ["color: #9e9e9e" if grey[row.name] else ""] * len(row), axis=1),
        hide_index=True,
        column_config={
            "predicted": widgets.time_column("predicted_step"),
            "measured": widgets.time_column("measured_step"),
            "error": widgets.percent_column("prediction_error", signed=True),
            # wide enough for its longest words, "too noisy (14.2%)" and "group 2" (a cut one read "too noisy (14.2%")
            "noise": st.column_config.TextColumn("noise", width="medium"),
            "indistinguishable": st.column_config.TextColumn("indistinguishable", width="medium"),
        },
    )
    cards = st.columns(2)
    if predictions_tie(result):
        cards[0].metric(
            "Planner's order",
            "indistinguishable",
            help="The planner predicts these candidates within "
            f"{format_percent(PREDICTION_TIE)} of each other: they are a tie, so no rank correlation "
            "is computed on their noise.",
        )
    else:
        cards[0].metric(
            "Rank correlation (Spearman)",
            MISSING if result.spearman is None else f"{result.spearman:+.2f}",
            help="Whether the planner orders the candidates as the machine does: +1.00 the same order",
        )
    cards[1].metric(
        "Recommended vs measured best",
        format_percent(result.recommended_gap, signed=True),
        help=f"How much slower the recommended candidate measured than the fastest measured one "
        f"({result.measured_best or 'none measured'})",
    )
    plot.show(charts_verify.intervals_figure(interval_rows(result)), "plan-verify-intervals")
    if any(grey):
        st.caption(
            "Grey: the measurement cannot tell these candidates apart from another of their group (their measured "
            "95% confidence intervals overlap); the rank correlation counts only the pairs it can order."
        )
    for line in verify.coverage_lines(result.to_dict()):  # informative intervals only
        st.caption(line)
    if result.since_profile is not None:  # the machine's move since the profile, apart from the model's error
        line = result.since_profile.line(rounds_moved=moved)
        st.caption(line[:1].upper() + line[1:] + ".")
    for note in result.notes:
        st.caption(note)
