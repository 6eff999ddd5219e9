"""Simulation: the engine, shared CPU cores, the data-parallel reduction, step times, metrics and memory."""

from __future__ import annotations

from pipesim._face import lazy_exports

# The package's face (docs/design.md, "The app through pipesim's faces"): each name and the module defining it,
# loaded on first use. `simulate` and `memory` are modules of this package, so their functions are reached as
# `pipesim.sim.simulate.simulate` or through `pipesim.api`.
FACE = {
    "Metrics": "pipesim.sim.metrics",
    "compute_metrics": "pipesim.sim.metrics",
    "inner_bubble_fraction": "pipesim.sim.metrics",
    "makespan": "pipesim.sim.metrics",
    "rank_memory": "pipesim.sim.memory",
    "find_deadlock": "pipesim.sim.simulate",
    "simulate_step": "pipesim.sim.steps",
}
__all__ = sorted(FACE)
__getattr__ = lazy_exports(__name__, FACE)
