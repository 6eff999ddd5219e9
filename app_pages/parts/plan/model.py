"""What the Plan page's predictions rest on: the preset a link names (its model restored), a
calibration from a finished run (the description's device rate fitted to it, pipesim.analysis.calibration), and a
notice when the predictions rest on an assumed device rate instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from app_pages.parts import state
from app_pages.parts.plan import presets
from pipesim.cost import ModelDescription
from pipesim.plan import PlanInputs

NO_CALIBRATION = "(none: rate assumed)"
CALIBRATE_KEY = "plan-calibrate"


def restore_preset() -> None:
    """A link that names a preset (`?plan-preset=small...`) opens the Plan page with that preset's model, not the
    form's defaults: the preset's values go into the fields the link does not set itself. Once per preset and
    session, before the form draws; picking a preset in the box applies it whole (its on_change)."""
    preset = st.query_params.get("plan-preset") or st.session_state.get("plan-preset")
    values = presets.PRESETS.get(preset)
    if values is None or st.session_state.get("plan-preset-restored") == preset:
        return
    for key, value in values.items():
        if key not in st.query_params:
            st.session_state[key] = value
    st.session_state["plan-preset-restored"] = preset


def _calibration_runs(root: Path) -> list[str]:
    """Finished runs that measured something (measured.json), newest first: what a calibration can fit."""
    if not root.is_dir():
        return []
    found = [p.parent for p in root.glob("*/measured.json") if (p.parent / "result.json").is_file()]
    return [p.name for p in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)]


def calibration_picker() -> str | None:
    """The run to calibrate the description from (sidebar, outside the form), or None."""
    runs = _calibration_runs(state.runs_root())
    picked = st.selectbox(
        "Calibrate from a run",
        [NO_CALIBRATION, *runs],
        key=state.kept(CALIBRATE_KEY),
        bind=state.URL,
        help="Fits the device rate and the per-action overhead to a finished run of the built-in Transformer (a "
        "Verify run of this plan works): the same as `python -m pipesim plan ... --calibrate-from RUN_DIR`",
    )
    return None if picked in (None, NO_CALIBRATION) else str(state.runs_root() / picked)


@st.cache_data(max_entries=8, show_spinner=False)
def _calibration(run_dir: str, stamp: float) -> Any:
    from pipesim.analysis import calibrate_from_run

    return calibrate_from_run(run_dir)


def plan_inputs(description: ModelDescription, run_dir: str | None, **common: Any) -> tuple[PlanInputs, dict]:
    """The planner's inputs for `description`, calibrated from `run_dir` when one is picked, and what the plan
    document records of it. ValueError names a run that cannot calibrate (not the built-in Transformer, ...)."""
    if run_dir is None:
        return PlanInputs.from_description(description, **common), {}
    measured = Path(run_dir) / "measured.json"
    calibration = _calibration(run_dir, measured.stat().st_mtime if measured.is_file() else 0.0)
    calibrated, runtime = calibration.apply(description)
    return PlanInputs.from_description(calibrated, runtime=runtime, **common), {
        "calibrated_from": calibration.to_dict()
    }


def notice(calibration: dict[str, Any], description: ModelDescription, verifying: bool = False) -> None:
    """Says, where predictions are shown, that they rest on an assumed device rate and how to calibrate them;
    nothing when they are calibrated."""
    if calibration.get("calibrated", True):
        return
    st.warning(
        f"**Predictions from an assumed device rate ({description.device_tflops:g} TFLOP/s), not from a profile "
        "of this machine.** "
        + (
            "The errors below measure that assumption, not the schedules. "
            if verifying
            else "Step times are estimates; their order holds better than their size. "
        )
        + "To calibrate: pick a finished run in **Calibrate from a run** in the sidebar (a Verify run of this plan "
        "works), or on the command line `python -m pipesim plan ... --calibrate-from runs/RUN_DIR`, or profile "
        "the model (`python -m executor profile`) and plan with `--cost`.",
        icon=":material/straighten:",
    )


def number_list(text: str, kind: type, label: str) -> tuple:
    """A field's comma-separated numbers, read as the URL's (pipesim.url_query.read_number_list: strict)."""
    from pipesim.url_query import read_number_list

    if not text.strip():
        raise ValueError(f"{label}: give at least one value")
    try:
        return read_number_list(text, kind is int, minimum=0)
    except ValueError as error:
        raise ValueError(f"{label}: {error}") from None
