"""The planner: search over schedules, sizes and splits under a memory cap, and its report."""

from __future__ import annotations

from pipesim._face import lazy_exports

# The package's face (docs/design.md, "The app through pipesim's faces"): each name and the module defining it,
# loaded on first use.
FACE = {
    "PlanInputs": "pipesim.plan.inputs",
    "IntervalOptions": "pipesim.plan.intervals",
    "attach_intervals": "pipesim.plan.intervals",
    "interval_of": "pipesim.plan.intervals",
    "measured_by": "pipesim.plan.intervals",
    "LaunchSpread": "pipesim.io.launch_history",
    "machine_launch_spread": "pipesim.plan.intervals",
    "profile_disturbance": "pipesim.plan.in_situ_check",
    "best_candidate": "pipesim.plan.report",
    "best_per_schedule": "pipesim.plan.report",
    "interval_text": "pipesim.plan.report",
    "pareto_front": "pipesim.plan.report",
    "plan_document": "pipesim.plan.report",
    "ranked": "pipesim.plan.report",
    "summary_lines": "pipesim.plan.report",
    "torchtitan_settings": "pipesim.plan.report",
    "Candidate": "pipesim.plan.candidates",
    "PlanSpace": "pipesim.plan.candidates",
    "OFFLOAD_CHOICES": "pipesim.plan.candidates",
    "Evaluator": "pipesim.plan.evaluator",
    "candidate_grid": "pipesim.plan.candidates",
    "evaluate_all": "pipesim.plan.search",
    "SYNTHESIZED": "pipesim.plan.synthesized",
    "plan_families": "pipesim.plan.synthesized",
    "synthesized_candidates": "pipesim.plan.synthesized",
    "materialise": "pipesim.plan.synthesized",
}
__all__ = sorted(FACE)
__getattr__ = lazy_exports(__name__, FACE)
