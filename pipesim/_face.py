"""A package's face: the names it exports, each loaded from its home module on first use (PEP 562).

Importing one module of a package then loads no other, and a caller reaches the names through the package, so the
modules behind it can move without touching the caller. A face never exports a name that is also one of the
package's modules (`pipesim.analysis.replay`, the module, and `replay`, its function): once the module is loaded
the package's attribute is the module, and the name would mean two things.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of package `package` whose face maps each exported name to the module defining it."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(home), name)

    return __getattr__
