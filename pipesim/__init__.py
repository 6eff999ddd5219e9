"""pipesim: pipeline-parallel schedules as data, simulated, measured and drawn.

Pure Python plus networkx (and plotly for `pipesim.charts` only). Never imports
torch or streamlit: the executor and the app build on this package, not the
other way round.
"""

from pipesim.cost.description import ModelDescription
from pipesim.cost.model import CostModel, LinkCost, StageCost
from pipesim.ir import Action, ActionKind, Schedule

__all__ = ["Action", "ActionKind", "CostModel", "LinkCost", "ModelDescription", "Schedule", "StageCost"]
