"""The names the user runs pipesim's two command lines by, read from how this process was started.

Installed, they are the console scripts `pipesim` and `pipesim-run`; in the checkout they may be
`python -m pipesim` and `python -m executor` (the checkout's shim; `python -m pipesim_executor` anywhere). Every
help text, error line and hint names the program as the user can type it here: `python -m executor` does not
exist in an installed environment, and `pipesim-run` is not on the PATH of a checkout that was never installed.

    programs()             # Programs(pipesim='pipesim', executor='pipesim-run') under a console script
    programs().executor    # 'python -m executor' when started as `python -m executor` in the checkout

A process that is neither (a test runner, the Streamlit app, a user's Python script) gets the checkout's names
when the checkout's `executor/` shim sits beside this package, else the console scripts'.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

PIPESIM_SCRIPT = "pipesim"  # pyproject.toml [project.scripts]
EXECUTOR_SCRIPT = "pipesim-run"
EXECUTOR_PACKAGE = "pipesim_executor"
CHECKOUT_SHIM = "executor"  # the checkout's `python -m executor` (not shipped)


class Programs(NamedTuple):
    """How to start each command line here: `pipesim`'s and the executor's."""

    pipesim: str
    executor: str


def in_checkout() -> bool:
    """Whether this pipesim is the checkout's (its `executor/` shim beside it), not an installed copy."""
    return (Path(__file__).resolve().parent.parent / CHECKOUT_SHIM / "__main__.py").is_file()


def _script_name(path: Path) -> str:
    """A console script's name without what an installer adds on Windows (a `.exe` or `-script.py` suffix)."""
    name = path.name
    for suffix in (".exe", "-script.py", ".py"):
        name = name.removesuffix(suffix)
    return name


def programs(argv0: str | None = None) -> Programs:
    """The two programs' names for this process (`argv0`: default sys.argv[0], how it was started)."""
    started = Path((sys.argv[0] if argv0 is None else argv0).replace("\\", "/"))  # a Windows path too
    checkout = in_checkout()
    module_executor = f"python -m {CHECKOUT_SHIM if checkout else EXECUTOR_PACKAGE}"
    if _script_name(started) in (PIPESIM_SCRIPT, EXECUTOR_SCRIPT):
        return Programs(PIPESIM_SCRIPT, EXECUTOR_SCRIPT)
    if started.name == "__main__.py" and started.parent.name in ("pipesim", CHECKOUT_SHIM, EXECUTOR_PACKAGE):
        package = started.parent.name
        executor = f"python -m {package}" if package != "pipesim" else module_executor
        return Programs("python -m pipesim", executor)
    if checkout:
        return Programs("python -m pipesim", module_executor)
    return Programs(PIPESIM_SCRIPT, EXECUTOR_SCRIPT)


def named_as_started(text: str) -> str:
    """`text` (a help text written with the checkout's names) with each program named as it is started here."""
    names = programs()
    return text.replace("python -m pipesim", names.pipesim).replace("python -m executor", names.executor)
