"""Runs in progress, found again by any session of this server: a reload must not lose a run.

A RunHandle lives in the Streamlit server process (its supervising thread); a browser reload starts a new
session whose session state is empty. This registry is one dict per server process (st.cache_resource), run
folder -> handle, so the Run page of any session can reattach to a run that is still going: live progress and
Cancel again. A run this server did not start (the command line, another app server) is followed from its
folder instead (pipesim_executor.host.watch.FolderRun: the same interface, read from the launcher's progress.json).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st


@st.cache_resource(show_spinner=False)
def _registry() -> dict[str, Any]:
    return {}


def remember(handle: Any) -> None:
    """Keep a started run's handle; finished ones are dropped on the next look-up."""
    _registry()[str(handle.run_dir)] = handle


def running(root: Path, run_dir: str | None = None) -> Any | None:
    """The handle of the run in `run_dir` while it runs (None: the latest running one under `root`): this
    server's own RunHandle when it has one, else one that follows the run from its folder."""
    from pipesim_executor.host import watch

    registry = _registry()
    for key in [k for k, handle in registry.items() if handle.done()]:
        registry.pop(key, None)
    if run_dir is not None:
        own = registry.get(str(Path(run_dir).resolve())) or registry.get(str(run_dir))
        return own if own is not None else watch.attach(run_dir)
    mine = [handle for handle in registry.values() if Path(handle.run_dir).parent in (Path(root), Path(root).resolve())]
    if mine:
        return mine[-1]
    others = watch.running_runs(root)
    return others[0] if others else None
