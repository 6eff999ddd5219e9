"""Earlier runs as table rows, re-read from the run folders only when one changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st


def _runs_stamp(root: Path) -> tuple:
    """Changes whenever a run folder appears, or a run writes its result."""
    if not root.is_dir():
        return ()
    stamp = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        result = folder / "result.json"
        stamp.append((folder.name, result.stat().st_mtime if result.exists() else None))
    return tuple(stamp)


@st.cache_data(max_entries=8, show_spinner=False)
def _run_rows(root: str, stamp: tuple) -> list[dict[str, Any]]:
    import datetime

    from pipesim.units import MISSING, format_ms, format_percent
    from pipesim_executor.host.run_folder import list_runs

    rows = []
    for result in list_runs(Path(root)):
        config = result.config
        rows.append(
            {
                "folder": result.run_dir.name,
                "status": result.status,
                "schedule": result.schedule.name if result.schedule is not None else MISSING,
                "ranks": str(config.pipeline.num_ranks) if config is not None else MISSING,
                "microbatches": f"{config.pipeline.num_microbatches:,}" if config is not None else MISSING,
                "measured step (ms)": format_ms(result.measured_step_ms, unit=False),
                "predicted step (ms)": format_ms(result.predicted_step_ms, unit=False),
                "error": format_percent(result.prediction_error, signed=True),
                "started": datetime.datetime.fromtimestamp(result.started_at).strftime("%Y-%m-%d %H:%M:%S")
                if result.started_at
                else MISSING,
                "outcome": result.headline,  # one sentence; the log tail is the run's own page's
            }
        )
    return rows


def run_list(root: str) -> list[dict[str, Any]]:
    """Earlier runs under `root`, newest first, as table rows (re-read only when a folder changes)."""
    return _run_rows(root, _runs_stamp(Path(root)))
