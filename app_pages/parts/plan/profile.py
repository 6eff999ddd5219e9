"""The Plan page's second source of a model: a unit profile (`executor profile --out DIR`, DIR/cost.json), picked
from the runs folder or uploaded. The planner then prices every candidate from what was measured on the devices
(`PlanInputs.from_profile`, as `pipesim plan --cost` does), each with its 90% interval, and Verify rebuilds the
profiled model from the plan (its `executor_model`). The profile's check against its own in-situ steps is shown
beside the results.

A profile, once picked, sets the page's microbatch sizes to the ones it measured (a size outside them is refused, as
on the command line) and its optimizer to one it timed, unless the one already chosen was timed. A link that names
the profile (`?plan-profile=NAME`) opens the same way, except for a field the link sets itself.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from app_pages.parts import state, url
from pipesim.analysis import check_line, recorded_check
from pipesim.cost import UnitProfile
from pipesim.io import cost_file_from_bytes, read_bytes
from pipesim.limits import MAX_COST_BYTES
from pipesim.numbers import shown
from pipesim.plan import PlanInputs, profile_disturbance
from pipesim.programs import programs

NO_PROFILE = "(none: the model description)"
PROFILE_KEY = "plan-profile"
UPLOAD_KEY = "plan-profile-upload"
APPLIED_KEY = "plan-profile-applied"  # the profile whose sizes and optimizer the form holds
LINK_CHECKED = "plan-profile-link-checked"  # the link's profile that was found missing, said once
PICKED_KEY = "plan-profile-picked"  # set when the user picks in the page (not a link): its settings then win
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
    bytes are read, and only a regular file's (a FIFO, a device or a folder named cost.json is skipped, never
    read; one that vanishes meanwhile too)."""
    if not root.is_dir():
        return []
    found = []
    for path in root.glob("*/cost.json"):
        head = _head(path)
        if head is not None and _VERSION_2.search(head[1]):
            found.append((head[0], path.parent.name))
    found.sort(reverse=True)
    return [name for _, name in found[:MAX_LISTED]]


def _head(path: Path) -> tuple[float, bytes] | None:
    """(modification time, first bytes) of regular file `path`; None for anything else. Opened without blocking
    (a FIFO put there after the glob would hang a plain open) and checked on the open descriptor."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return None
        return info.st_mtime, os.read(handle, _HEAD_BYTES)
    except OSError:
        return None
    finally:
        os.close(handle)


def profile_picker() -> PickedProfile | None:
    """The sidebar's profile box and upload; the profile picked (an upload wins over the box), or None. A file
    that cannot be read is reported here and planning falls back to the description."""
    root = state.runs_root()
    names = profile_folders(root)
    linked = st.query_params.get(PROFILE_KEY)
    if linked is not None and linked not in (NO_PROFILE, *names) and st.session_state.get(LINK_CHECKED) != linked:
        st.session_state[LINK_CHECKED] = linked  # said once: the box then shows the description, the default
        url.forget([PROFILE_KEY])
        st.warning(
            f"The link's profile {shown(linked, 40)} is not under {root}/ "
            + (f"(profiles there: {', '.join(names[:5])}); " if names else "(no profile there); ")
            + "planning from the model description.",
            icon=":material/link_off:",
        )
    st.selectbox(
        "Plan from a profile",
        [NO_PROFILE, *names],
        key=state.kept(PROFILE_KEY),
        bind=state.URL,
        on_change=_picked_here,
        help=f"A model profiled unit by unit on this machine ({programs().executor} profile --out "
        f"{root}/NAME): every candidate priced from what was measured, with its 90% interval; the same as "
        f"`{programs().pipesim} plan --cost {root}/NAME/cost.json`",
    )
    if not names:
        st.caption(f"No profile found under {root}/. Make one: `{make_profile_command(root)}`")
    upload = st.file_uploader("…or upload a profile's cost.json", type=["json"], key=UPLOAD_KEY, on_change=_picked_here)
    try:
        picked = picked_profile(root, upload)
    except ValueError as error:
        st.error(f"Cannot plan from this profile: {error}", icon=":material/error:")
        picked = None
    identity = None if picked is None else (picked.origin, getattr(upload, "file_id", None))
    if picked is not None and st.session_state.get(APPLIED_KEY) != identity:
        take_settings(picked.profile, overwrite=bool(st.session_state.pop(PICKED_KEY, False)))
    st.session_state[APPLIED_KEY] = identity
    return picked


def make_profile_command(root: Path) -> str:
    """The command that makes a profile this box lists (the small model, at the planner's usual sizes)."""
    return f"{programs().executor} profile --model transformer --microbatch-sizes 1,2,4 --out {root}/profile"


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


def _picked_here() -> None:
    st.session_state[PICKED_KEY] = True


def take_settings(profile: UnitProfile, overwrite: bool) -> None:
    """The sizes field becomes the sizes `profile` measured, and the optimizer one it timed (where the one chosen
    was not); before the form draws. Without `overwrite` (a link opened), a field the link sets keeps its value."""
    if overwrite or SIZES_KEY not in st.query_params:
        st.session_state[state.kept(SIZES_KEY)] = ",".join(map(str, profile.microbatch_sizes))
    timed = sorted(profile.optimizers)
    chosen = st.session_state.get(state.kept(OPTIMIZER_KEY), st.query_params.get(OPTIMIZER_KEY))
    if timed and chosen not in timed and (overwrite or OPTIMIZER_KEY not in st.query_params):
        st.session_state[state.kept(OPTIMIZER_KEY)] = timed[0]


def plan_inputs(picked: PickedProfile, **common: Any) -> tuple[PlanInputs, dict[str, Any]]:
    """The planner's inputs from the profile and what the plan document records: the model Verify rebuilds
    (`executor_model`) and the device and dtype it was measured with (as `pipesim plan --cost` records them)."""
    profile = picked.profile
    run = {key: profile.provenance.get(key) for key in ("device", "dtype")}
    recorded = {"cost_file": picked.origin, "executor_model": dict(profile.model), "run": run}
    return PlanInputs.from_profile(profile, **common), recorded


@st.cache_data(max_entries=4, show_spinner=False)
def _disturbance(profile: UnitProfile) -> dict[str, Any] | None:
    return profile_disturbance(profile)  # plans its in-situ steps: a few tenths of a second, once per profile


def disturbance(picked: PickedProfile) -> dict[str, Any] | None:
    """The profile's verdict as `pipesim plan --cost` decides it (other work disturbed it: a bias in its own check,
    or ranks that waited for cores), with `accepted` as the plan JSON records it; None: nothing to check. The page
    plans from it anyway and says so above the results, where the command line refuses without a flag."""
    verdict = _disturbance(picked.profile)
    return None if verdict is None else {**verdict, "accepted": bool(verdict["disturbed"])}


def describe(picked: PickedProfile, calibration: dict[str, Any]) -> None:
    """What the plan rests on: the profile, its model and sizes, and how well it predicts its own in-situ steps."""
    profile = picked.profile
    verdict = disturbance(picked)
    if verdict is not None and verdict["disturbed"]:
        st.warning(
            f"This profile is {verdict['line']}. The plan below is priced from it anyway: its predictions and "
            "intervals carry that load (the command line refuses such a profile without "
            "`--accept-disturbed-profile`).",
            icon=":material/warning:",
        )
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
