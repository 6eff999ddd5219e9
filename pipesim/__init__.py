"""pipesim: pipeline-parallel schedules as data, simulated, measured and drawn.

The names in `__all__` are pipesim's Python API (docs/api.md); everything else is internal and may change. They
load on first use (`__getattr__`), so that `import pipesim` stays light: numpy, networkx and plotly are imported
only by what needs them. pipesim never imports torch or streamlit.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# The one place the version is written: pyproject.toml reads it (setuptools dynamic version).
__version__ = "0.1.0"

# name -> the module that defines it
_API = {
    # schedules
    "Schedule": "pipesim.ir",
    "Action": "pipesim.ir",
    "ActionKind": "pipesim.ir",
    "build_schedule": "pipesim.schedules",
    "schedule_names": "pipesim.schedules",
    "load_schedule": "pipesim.io.formats",
    "save_schedule": "pipesim.io.formats",
    "load_torch_csv": "pipesim.api",
    "to_torch_csv": "pipesim.api",
    # costs
    "CostModel": "pipesim.cost.model",
    "StageCost": "pipesim.cost.model",
    "LinkCost": "pipesim.cost.model",
    "Perturbation": "pipesim.cost.perturb",
    "ModelDescription": "pipesim.cost.description",
    "cost_from_times": "pipesim.cost.convert",
    "load_cost_file": "pipesim.io.cost_file",
    # simulating and reading the result
    "simulate": "pipesim.api",
    "metrics": "pipesim.api",
    "compare": "pipesim.api",
    "Timeline": "pipesim.records",
    "load_timeline": "pipesim.io.formats",
    "save_timeline": "pipesim.io.formats",
    # figures (plotly)
    "gantt_figure": "pipesim.api",
    "memory_figure": "pipesim.api",
    "comparison_figure": "pipesim.api",
    # planning
    "PlanInputs": "pipesim.plan.inputs",
    "PlanSpace": "pipesim.plan.search",
    "plan_candidates": "pipesim.api",
    "pareto_front": "pipesim.plan.report",
    "best_candidate": "pipesim.plan.report",
    # runs of the executor
    "read_run": "pipesim.io.run_record",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'pipesim' has no attribute {name!r}")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
