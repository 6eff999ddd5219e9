"""pipesim: pipeline-parallel schedules as data, simulated, measured and drawn.

Pure Python plus networkx (and plotly for `pipesim.charts` only). Never imports
torch or streamlit: the executor and the app build on this package, not the
other way round.

Keep this module light: `pipesim list` imports it, and must not pull in plotly or networkx
(tests/test_install.py checks it).
"""

from pipesim.cost.description import ModelDescription
from pipesim.cost.model import CostModel, LinkCost, StageCost
from pipesim.ir import Action, ActionKind, Schedule

# The one place the version is written: pyproject.toml reads it (setuptools dynamic version).
__version__ = "0.1.0"

__all__ = ["Action", "ActionKind", "CostModel", "LinkCost", "ModelDescription", "Schedule", "StageCost", "__version__"]
