"""Reading results: comparisons, measured against simulated, attribution of lost time, critical paths, replays."""

from __future__ import annotations

from pipesim._face import lazy_exports

# The package's face (docs/design.md, "The app through pipesim's faces"): each name and the module defining it,
# loaded on first use.
FACE = {
    "NOISY_STEP_CV": "pipesim.analysis.attribution",
    "attribute_run": "pipesim.analysis.attribution",
    "attribute_step": "pipesim.analysis.attribution",
    "calibrate_from_run": "pipesim.analysis.calibration",
    "ComparisonRow": "pipesim.analysis.compare",
    "compare_schedules": "pipesim.analysis.compare",
    "align": "pipesim.analysis.overlay",
    "pick_step": "pipesim.analysis.overlay",
    "steps_of": "pipesim.analysis.overlay",
    "check_line": "pipesim.analysis.profile_check",
    "recorded_check": "pipesim.analysis.profile_check",
    "DEFAULT_SLOWDOWN": "pipesim.analysis.sensitivity",
    "Sensitivity": "pipesim.analysis.sensitivity",
    "rank_sensitivity": "pipesim.analysis.sensitivity",
    "describe": "pipesim.analysis.stragglers",
    "find_stragglers": "pipesim.analysis.stragglers",
}
__all__ = sorted(FACE)
__getattr__ = lazy_exports(__name__, FACE)
