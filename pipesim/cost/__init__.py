"""What things cost: stage times and bytes, links, collectives, the data-parallel group, descriptions, balancing."""

from __future__ import annotations

from pipesim._face import lazy_exports

# The package's face (docs/design.md, "The app through pipesim's faces"): each name and the module defining it,
# loaded on first use.
FACE = {
    "CostModel": "pipesim.cost.model",
    "StageCost": "pipesim.cost.model",
    "LinkCost": "pipesim.cost.model",
    "Perturbation": "pipesim.cost.perturb",
    "MAX_FACTOR": "pipesim.cost.perturb",
    "parse_link_delay": "pipesim.cost.perturb",
    "ModelDescription": "pipesim.cost.description",
    "DTYPE_BYTES": "pipesim.cost.description",
    "UnitProfile": "pipesim.cost.profile",
    "OPTIMIZERS": "pipesim.cost.runtime",
    "TransformerShape": "pipesim.cost.shape",
    "cost_from_times": "pipesim.cost.convert",
    "format_split_points": "pipesim.cost.balance",
}
__all__ = sorted(FACE)
__getattr__ = lazy_exports(__name__, FACE)
