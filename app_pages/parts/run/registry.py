"""Runs in progress, found again by any session of this server: a reload must not lose a run.

A RunHandle lives in the Streamlit server process (its supervising thread); a browser reload starts a new
session whose session state is empty. This registry is one dict per server process (st.cache_resource), run
folder -> handle, so the Run page of any session can reattach to a run that is still going: live progress and
Cancel again. A run this server's Run page did not start (a Plan verification, the command line, another app
server) is no run of the user's: the page names it in a banner (app_pages.parts.run.elsewhere), and follows it
from its folder (pipesim_executor.host.watch.FolderRun: the same interface) only when the user opens it.
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
    """The handle of the run in `run_dir` while it runs: this server's own RunHandle when it has one, else one that
    follows the run from its folder. Without `run_dir`: the latest run under `root` this server's Run page
    started, still going (a reload finds it), or None."""
    from pipesim_executor.host import watch

    registry = _registry()
    for key in [k for k, handle in registry.items() if handle.done()]:
        registry.pop(key, None)
    if run_dir is not None:
        own = registry.get(str(Path(run_dir).resolve())) or registry.get(str(run_dir))
        return own if own is not None else watch.attach(run_dir)
    mine = [handle for handle in registry.values() if Path(handle.run_dir).parent in (Path(root), Path(root).resolve())]
    return mine[-1] if mine else None
