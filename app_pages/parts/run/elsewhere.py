"""The Run page while another job times on this machine: a banner with its progress and a link, never a takeover.

A run another program started (a Plan verification of this server, `executor run` or `verify-plan` in a
terminal, another app server) is shown for what it is: who holds the machine (pipesim_executor.host.machine),
how far it is, its log, a link that opens it and a Cancel. The user's form, their URL and the run they opened stay
as they were; Launch waits (the form's button is off, with the reason) until the machine is free, since a second
run on the same cores would spoil both timings. The page moves to that run's result only when the user acts on
it (Cancel; the link opens it in its own tab).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from app_pages.parts.run import live
from pipesim_executor.host import machine

HELD = "run-machine-held"  # session key: whether the last look found the machine held (a change reruns the page)
POLL_S = 1.0


def busy(root: Path, own: Any | None) -> str | None:
    """Why Launch must wait now (one sentence), or None: the machine is free, or the job holding it is the run
    this page follows itself (`own`)."""
    holder, run = _job(root)
    if holder is None and run is None:
        return None
    if own is not None and not own.done() and run is not None and Path(run.run_dir) == Path(own.run_dir).resolve():
        return None
    return "Launch waits: another job is timing on this machine, and a second run on its cores would spoil both."


def _job(root: Path) -> tuple[machine.Holder | None, Any | None]:
    """Who holds the machine, and its run going now followed from its folder (a run of an older launcher that
    took no lock is found under the runs folder)."""
    from pipesim_executor.host import watch

    holder = machine.holder()
    if holder is not None:
        return holder, watch.attach(holder.run_dir) if holder.run_dir else None
    others = watch.running_runs(root)
    return None, (others[0] if others else None)


def show(root: Path, own: Any | None) -> None:
    """The banner, redrawn every second while the machine is held; the whole page reruns once it is free (Launch).
    A page opened on a free machine does not poll: a job that starts later refuses its Launch with the reason
    (pipesim_executor.host.machine.MachineBusy)."""
    held = busy(root, own) is not None
    st.session_state[HELD] = held
    st.fragment(run_every=POLL_S if held else None)(_banner)(root, own)


def _banner(root: Path, own: Any | None) -> None:
    reason = busy(root, own)
    if (reason is not None) != st.session_state.get(HELD):
        st.session_state[HELD] = reason is not None
        st.rerun()
    if reason is None:
        return
    holder, run = _job(root)
    st.warning(f"**{_who(holder, run)}** {reason}", icon=":material/hourglass_top:")
    if run is not None and Path(run.run_dir).parent == root.resolve():
        st.markdown(f"[Open its run]({_link(run.run_dir.name)}) (a new tab: this page keeps your form and run)")
    share = _share(holder, run)
    st.progress(share, text=_where(holder, run))
    if run is None:
        return
    config = getattr(run, "config", None)
    if config is not None:
        st.caption(f"Its settings: {config.describe()}. Your form keeps yours.")
    with st.expander("Its log", expanded=holder is None or holder.runs_total == 1):
        live.log(run)
    if st.button("Cancel it", icon=":material/stop_circle:", key="run-elsewhere-cancel", type="secondary"):
        with st.spinner("Ending every process of that run…"):
            run.cancel()
        st.session_state["selected_run"] = str(run.run_dir)  # the user acted on it: its result is theirs to see
        st.session_state[HELD] = None
        st.rerun()


def _who(holder: machine.Holder | None, run: Any | None) -> str:
    if holder is None:
        return f"A run is going ({run.run_dir.name})." if run is not None else "A run is going."
    started = datetime.datetime.fromtimestamp(holder.started_at).strftime("%H:%M:%S") if holder.started_at else "?"
    what = f"executor {holder.command}" + (f" ({holder.job})" if holder.job else "")
    return f"{what} has held this machine since {started}."


def _share(holder: machine.Holder | None, run: Any | None) -> float:
    within = float(run.progress) if run is not None else 0.0
    if holder is None or holder.runs_total <= 1:
        return within
    return min(1.0, (holder.runs_done + within) / holder.runs_total)


def _where(holder: machine.Holder | None, run: Any | None) -> str:
    parts = [holder.step] if holder is not None and holder.step else []
    if run is not None:
        parts.append(live.where(run))
    return "; ".join(parts) or "between two of its runs"


def _link(name: str) -> str:
    """This page's URL with `run=NAME`: the user's settings come along."""
    pairs = [(k, v) for k in st.query_params if k != "run" for v in st.query_params.get_all(k)]
    return "run?" + urlencode([*pairs, ("run", name)])
