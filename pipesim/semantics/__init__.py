"""What a schedule means: the lowering (dependencies, messages, liveness), validation, the dependency graph."""

from __future__ import annotations

from pipesim._face import lazy_exports

# The package's face (docs/design.md, "The app through pipesim's faces"): each name and the module defining it,
# loaded on first use.
FACE = {
    "DeadlockError": "pipesim.semantics.dag",
    "build_dag": "pipesim.semantics.dag",
    "dag_positions": "pipesim.semantics.dag",
    "dependencies": "pipesim.semantics.dag",
    "find_problems": "pipesim.semantics.validate",
    "ScheduleError": "pipesim.semantics.validate",
}
__all__ = sorted(FACE)
__getattr__ = lazy_exports(__name__, FACE)
