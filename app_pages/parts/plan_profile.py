"""The Plan page's second source of a model: a unit profile (`executor profile --out DIR`, DIR/cost.json), picked
from the runs folder or uploaded. The planner then prices every candidate from what was measured on the devices
(`PlanInputs.from_profile`, as `pipesim plan --cost` does), each with its 90% interval, and Verify rebuilds the
profiled model from the plan (its `executor_model`). The profile's check against its own in-situ steps is shown
beside the results (issue 29).

Picking a profile sets the page's microbatch sizes to the ones it measured (a size outside them is refused, as on
the command line) and its optimizer to one it timed, unless the one already chosen was timed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from app_pages.parts import state
from pipesim.analysis.profile_check import check_line, recorded_check
from pipesim.cost.profile import UnitProfile
from pipesim.io.bounded import read_bytes
from pipesim.io.cost_file import cost_file_from_bytes
from pipesim.limits import MAX_COST_BYTES
from pipesim.plan.inputs import PlanInputs
from pipesim.programs import programs

NO_PROFILE = "(none: the model description)"
PROFILE_KEY = "plan-profile"
UPLOAD_KEY = "plan-profile-upload"
SIZES_KEY = "plan-mbs"  # the page's microbatch sizes field
OPTIMIZER_KEY = "plan-optimizer"
MAX_LISTED = 200  # profile folders offered in the box, newest first
_HEAD_BYTES = 256  # enough of a cost file's start to read its format and version
_VERSION_2 = re.compile(rb'"format"\s*:\s*"pipesim\.cost"\s*,\s*"version"\s*:\s*2\b')


@dataclass(frozen=True)
class PickedProfile:
    """A unit profile and where it came from (`origin`: the file's path, or the upload's name)."""

    profile: UnitProfile
    origin: str


def profile_folders(root: Path) -> list[str]:
    """Folders under `root` whose cost.json is a unit profile (version 2), newest first: only the file's first
    bytes are read, and only regular files (a FIFO or a folder named cost.json is skipped, never opened)."""
    if not root.is_dir():
        return []
    found = []
    for path in root.glob("*/cost.json"):
        try:
            if path.is_file() and _VERSION_2.search(_head(path)):
                found.append(path)
        except (OSError, ValueError):
            continue
    found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return [p.parent.name for p in found[:MAX_LISTED]]


def _head(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(_HEAD_BYTES)


def profile_picker() -> PickedProfile | None:
    """The sidebar's profile box and upload; the profile picked (an upload wins over the box), or None. A file
    that cannot be read is reported here and planning falls back to the description."""
    root = state.runs_root()
    names = profile_folders(root)
    st.selectbox(
        "Plan from a profile",
        [NO_PROFILE, *names],
        key=state.kept(PROFILE_KEY),
        bind=state.URL,
        on_change=_take_profile_settings,
        help=f"A model profiled unit by unit on this machine ({programs().executor} profile --out "
        f"{root}/NAME): every candidate priced from what was measured, with its 90% interval; the same as "
        f"`{programs().pipesim} plan --cost {root}/NAME/cost.json`",
    )
    upload = st.file_uploader(
        "…or upload a profile's cost.json", type=["json"], key=UPLOAD_KEY, on_change=_take_profile_settings
    )
    try:
        return picked_profile(root, upload)
    except ValueError as error:
        st.error(f"Cannot plan from this profile: {error}", icon=":material/error:")
        return None


def picked_profile(root: Path, upload: Any = None) -> PickedProfile | None:
    """The upload's profile, else the box's, else None; ValueError for a file that is not a unit profile."""
    if upload is not None:
        raw = upload.getvalue()
        return PickedProfile(_profile_from_bytes(raw, upload.name), upload.name)
    name = st.session_state.get(state.kept(PROFILE_KEY))
    if name in (None, NO_PROFILE):
        return None
    path = root / str(name) / "cost.json"
    try:
        stamp = path.stat().st_mtime
    except OSError:
        raise ValueError(f"{path} is gone; pick another profile") from None
    return PickedProfile(_profile_file(str(path), stamp), str(path))


@st.cache_data(max_entries=4, show_spinner=False)
def _profile_file(path: str, stamp: float) -> UnitProfile:
    """A profile file read (bounded, regular files only) and checked; cached by path and modification time."""
    return _profile_from_bytes(read_bytes(path, MAX_COST_BYTES, "cost file"), path)


def _profile_from_bytes(raw: bytes, name: str) -> UnitProfile:
    loaded = cost_file_from_bytes(raw, name)
    if not isinstance(loaded, UnitProfile):
        raise ValueError(
            f"{name} holds a run's stage costs (version 1), not a model profiled unit by unit: make one with "
            f"`{programs().executor} profile --out DIR` (the Simulate page reads stage costs)"
        )
    return loaded


def _take_profile_settings() -> None:
    """On picking a profile: the sizes field becomes the sizes it measured, and the optimizer one it timed."""
    try:
        picked = picked_profile(state.runs_root(), st.session_state.get(UPLOAD_KEY))
    except ValueError:
        return  # the picker reports it when the page draws
    if picked is None:
        return
    profile = picked.profile
    st.session_state[state.kept(SIZES_KEY)] = ",".join(map(str, profile.microbatch_sizes))
    timed = sorted(profile.optimizers)
    if timed and st.session_state.get(state.kept(OPTIMIZER_KEY)) not in timed:
        st.session_state[state.kept(OPTIMIZER_KEY)] = timed[0]


def plan_inputs(picked: PickedProfile, **common: Any) -> tuple[PlanInputs, dict[str, Any]]:
    """The planner's inputs from the profile and what the plan document records: the model Verify rebuilds
    (`executor_model`) and the device and dtype it was measured with (as `pipesim plan --cost` records them)."""
    profile = picked.profile
    run = {key: profile.provenance.get(key) for key in ("device", "dtype")}
    recorded = {"cost_file": picked.origin, "executor_model": dict(profile.model), "run": run}
    return PlanInputs.from_profile(profile, **common), recorded


def describe(picked: PickedProfile, calibration: dict[str, Any]) -> None:
    """What the plan rests on: the profile, its model and sizes, and how well it predicts its own in-situ steps."""
    profile = picked.profile
    model = profile.model.get("spec") or profile.model.get("kind") or "a model"
    device = profile.provenance.get("device", "its device")
    check = check_line(calibration.get("check") or recorded_check(profile.provenance))
    st.info(
        f"**Planned from the profile** `{picked.origin}`: {model}, {len(profile.units)} units, measured on "
        f"{device} at microbatch sizes {', '.join(map(str, profile.microbatch_sizes))}. The model fields in the "
        "sidebar are not used. Each bar is the measured prediction's 90% interval (the profile's own spread; the "
        "spread field is for descriptions)."
        + (f"\n\nSelf-check: {check[0].removeprefix('check').strip()}." if check else ""),
        icon=":material/straighten:",
    )
