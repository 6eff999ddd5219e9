"""Shared UI pieces for the pages: session defaults, limits, cached pure wrappers,
the cost inputs several pages reuse, and the download buttons under every chart.

Pages stay thin: they draw widgets, turn them into a config, call pipesim through
the cached wrappers here and hand the results to `pipesim.charts`. Nothing here
simulates or schedules by itself; it only caches and adapts pipesim's calls for
Streamlit (bounded caches, plain-value results that pickle cleanly).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipesim import charts, charts_dag, formats, schedules
from pipesim.compare import ComparisonRow, compare_schedules
from pipesim.cost import DTYPE_BYTES, CostModel, ModelDescription, cost_from_times
from pipesim.cost_file import cost_from_dict, load_cost
from pipesim.critical_path import critical_path
from pipesim.dag import DeadlockError, build_dag, dag_positions
from pipesim.ir import Action, Schedule
from pipesim.simulate import find_deadlock, simulate
from pipesim.timeline import Metrics, Timeline, compute_metrics

# Limits that keep a browser tab responsive (tens of thousands of bars are fine in
# plotly, hundreds of thousands are not) and reruns fast.
MAX_RANKS = 32
MAX_MICROBATCHES = 128
MAX_CUSTOM_ACTIONS = 20_000

# The first screen: a meaningful chart before any input is touched.
DEFAULT_SCHEDULE = "1f1b"
DEFAULT_RANKS = 4
DEFAULT_MICROBATCHES = 8
DEFAULT_CHUNKS = 2

COST_SOURCES = ("Uniform", "Per stage", "Model", "Cost file")
MIB = 2**20
RUNS_ROOT_ENV = "PIPESIM_RUNS_ROOT"
CUSTOM_SCHEDULE_LABEL = "custom (from the Custom page)"  # the Run page's entry for a schedule sent to it

# A deadlock the DAG and Custom pages can show: each rank's order is fine on its own,
# but rank 1 starts with microbatch 1 while rank 0 waits for microbatch 0's backward.
DEADLOCK_EXAMPLE_CSV = "0F0,0B0,0F1,0B1\r\n1F1,1B1,1F0,1B0\r\n"
# A file with a typo (``0X1``) and a forward without its backward.
BROKEN_EXAMPLE_CSV = "0F0,0X1,0B0\r\n1F0,1B0,1F1\r\n"


def init_state() -> None:
    """Session keys every page may read; set once per session, never overwritten."""
    st.session_state.setdefault("custom_csv", None)  # filled from the default template on first use
    st.session_state.setdefault("custom_version", 0)  # bumps when a template or an upload replaces the table
    st.session_state.setdefault("run_handle", None)  # executor.launch.RunHandle of the run in progress
    st.session_state.setdefault("run_schedule", None)  # a custom Schedule sent from the Custom page
    st.session_state.setdefault("selected_run", None)  # run folder shown on the Run page
    st.session_state.setdefault("exports", {})  # key -> (signature, {fmt: bytes} or a message)


def runs_root() -> Path:
    """Where runs live: ./runs, or $PIPESIM_RUNS_ROOT (tests point it at a temporary folder)."""
    return Path(os.environ.get(RUNS_ROOT_ENV) or "runs")


def check_limits(num_ranks: int, num_microbatches: int, num_actions: int | None = None) -> None:
    """Refuse sizes that would make the browser crawl, naming the limit."""
    if num_ranks > MAX_RANKS:
        raise ValueError(f"{num_ranks} ranks is more than this app draws (at most {MAX_RANKS}); "
                         "use the command line (python -m pipesim) for larger pipelines")
    if num_microbatches > MAX_MICROBATCHES:
        raise ValueError(f"{num_microbatches} microbatches is more than this app draws (at most {MAX_MICROBATCHES}); "
                         "use the command line (python -m pipesim) for longer steps")
    if num_actions is not None and num_actions > MAX_CUSTOM_ACTIONS:
        raise ValueError(f"the schedule has {num_actions} actions; this app draws at most {MAX_CUSTOM_ACTIONS}")


def signature(*parts: object) -> str:
    """A short digest of a page's inputs: tells whether a prepared export still matches the chart."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def format_bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1024
    return f"{value} B"  # unreachable


# --- cached pure wrappers -----------------------------------------------------------------
# Schedules and cost models are frozen dataclasses with a cheap built-in hash; hashing
# them field by field (Streamlit's default for dataclasses) would cost more than the
# simulation of a small schedule.

def schedule_key(schedule: Schedule) -> tuple:
    return (schedule.name, schedule.num_ranks, schedule.num_microbatches, schedule.stage_to_rank,
            hash(schedule.actions))


HASH_FUNCS: dict[Any, Callable[[Any], Any]] = {Schedule: schedule_key, CostModel: hash}


@st.cache_data(max_entries=64, show_spinner=False)
def registered_schedule(name: str, num_ranks: int, num_microbatches: int, chunks: int | None = None) -> Schedule:
    """A registered schedule; `chunks` goes only to the families that take num_virtual_stages."""
    check_limits(num_ranks, num_microbatches)
    options = schedules.options_for(name, num_virtual_stages=chunks)
    return schedules.build_schedule(name, num_ranks, num_microbatches, **options)


@st.cache_data(max_entries=32, show_spinner=False)
def csv_schedule(text: str, name: str = "custom") -> Schedule:
    schedule = formats.schedule_from_csv(text, name=name)
    check_limits(schedule.num_ranks, schedule.num_microbatches, schedule.num_actions)
    return schedule


@st.cache_data(max_entries=32, show_spinner=False, hash_funcs=HASH_FUNCS)
def simulation(schedule: Schedule, cost: CostModel) -> tuple[Timeline, Metrics]:
    """Simulated timeline and its metrics (raises DeadlockError / ValueError on bad input)."""
    cost.check_fits(schedule)
    timeline = simulate(schedule, cost)
    return timeline, compute_metrics(timeline, cost)


@st.cache_data(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def critical_actions(schedule: Schedule, cost: CostModel) -> list[Action]:
    timeline, _ = simulation(schedule, cost)
    return critical_path(schedule, timeline, cost)


@st.cache_data(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def comparison(names: tuple[str, ...], num_ranks: int, num_microbatches: int, cost: CostModel,
               chunks: int | None) -> list[ComparisonRow]:
    check_limits(num_ranks, num_microbatches)
    return compare_schedules(list(names), num_ranks, num_microbatches, cost, num_virtual_stages=chunks)


# Figures are cached as resources, not data: a plotly Figure pickles back only through
# full re-validation, which costs as much as building it. They are shared between
# sessions, so callers treat them as read-only (st.plotly_chart and the exporters copy).

@st.cache_resource(max_entries=32, show_spinner=False, hash_funcs=HASH_FUNCS)
def gantt_chart(schedule: Schedule, cost: CostModel, with_critical_path: bool = False) -> go.Figure:
    timeline, _ = simulation(schedule, cost)
    path = critical_actions(schedule, cost) if with_critical_path else None
    return charts.gantt_figure(timeline, title=schedule.describe(), critical_path=path)


@st.cache_resource(max_entries=32, show_spinner=False, hash_funcs=HASH_FUNCS)
def memory_chart(schedule: Schedule, cost: CostModel) -> go.Figure:
    timeline, _ = simulation(schedule, cost)
    return charts.memory_figure(timeline, cost)


@st.cache_resource(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def dag_chart(schedule: Schedule, cost: CostModel, with_critical_path: bool) -> go.Figure:
    cycle = deadlock_cycle(schedule)
    path = critical_actions(schedule, cost) if with_critical_path and cycle is None else None
    graph = build_dag(schedule, cost)
    timeline = simulation(schedule, cost)[0] if cycle is None else None
    positions = dag_positions(schedule, graph, timeline)
    return charts_dag.dag_figure(graph, positions, title=f"{schedule.name}: dependency graph",
                                 critical_path=path, cycle=cycle)


@st.cache_data(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def deadlock_cycle(schedule: Schedule) -> list[Action] | None:
    return find_deadlock(schedule)


@st.cache_data(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def deadlock_explanation(schedule: Schedule) -> str | None:
    """Who waits on whom, in the simulator's words (None when the schedule runs)."""
    try:
        simulate(schedule, CostModel.uniform())
    except DeadlockError as error:
        return error.detail
    return None


# --- cost inputs --------------------------------------------------------------------------

def cost_source_picker(prefix: str, sources: Sequence[str] = COST_SOURCES) -> str:
    """Outside the form, so choosing a source swaps the fields at once."""
    return st.radio("Cost source", sources, key=f"{prefix}-cost-source", horizontal=True,
                    help="Uniform numbers, a per-stage table, a model description, or a cost file "
                         "written by a profile run (runs/*/cost.json)")


def stage_table_default(num_stages: int) -> pd.DataFrame:
    """A starting table: the last stage heavier (it holds the output layer and the loss)."""
    heavy = [1.5 if s == num_stages - 1 else 1.0 for s in range(num_stages)]
    return pd.DataFrame({
        "forward_ms": heavy,
        "backward_ms": [2 * f for f in heavy],
        "weight_ms": [f for f in heavy],
        "activation_mib": [1.0] * num_stages,
    }, index=pd.Index([f"stage {s}" for s in range(num_stages)], name="stage"))


def cost_fields(prefix: str, source: str, num_stages: int) -> dict[str, Any]:
    """Draw the fields of one cost source (inside a form); returns a plain spec for `cost_model`."""
    spec: dict[str, Any] = {"source": source}
    if source == "Uniform":
        left, right = st.columns(2)
        spec["forward_ms"] = left.number_input("F (ms)", 0.0, 1e6, 1.0, 0.1, key=f"{prefix}-f")
        spec["backward_ms"] = right.number_input("B (ms)", 0.0, 1e6, 2.0, 0.1, key=f"{prefix}-b",
                                                 help="The full backward; I and W split it")
        spec["weight_ms"] = left.number_input("W share of B (ms)", 0.0, 1e6, 1.0, 0.1, key=f"{prefix}-w",
                                              help="Only used by zero-bubble schedules (I = B - W)")
        spec["comm_ms"] = right.number_input("Transfer (ms)", 0.0, 1e6, 0.0, 0.05, key=f"{prefix}-comm",
                                             help="Per cross-rank send of an activation or gradient")
        spec["activation_mib"] = st.number_input("Activations per microbatch and stage (MiB)", 0.0, 1e9, 1.0,
                                                 key=f"{prefix}-act")
    elif source == "Per stage":
        st.caption(f"One row per stage ({num_stages} stages).")
        spec["table"] = st.data_editor(stage_table_default(num_stages), key=f"{prefix}-stages-{num_stages}",
                                       num_rows="fixed", width="stretch")
        spec["comm_ms"] = st.number_input("Transfer (ms)", 0.0, 1e6, 0.0, 0.05, key=f"{prefix}-stages-comm")
    elif source == "Model":
        spec["model"] = _model_fields(prefix)
        spec["num_stages"] = num_stages
    else:
        spec.update(_cost_file_fields(prefix))
    spec["recompute"] = st.toggle("Activation recomputation", key=f"{prefix}-recompute",
                                  help="Backward pays its forward again; only stage inputs stay stashed")
    return spec


def _model_fields(prefix: str) -> dict[str, Any]:
    defaults = {f.name: f.default for f in dataclasses.fields(ModelDescription)}
    left, right = st.columns(2)
    values: dict[str, Any] = {}
    ints = ("num_layers", "hidden_size", "ffn_size", "num_heads", "seq_len", "microbatch_size")
    for i, name in enumerate(ints):
        column = left if i % 2 == 0 else right
        values[name] = column.number_input(name.replace("_", " "), 1, 10**7, defaults[name], key=f"{prefix}-m-{name}")
    values["dtype"] = left.selectbox("dtype", list(DTYPE_BYTES), index=list(DTYPE_BYTES).index(defaults["dtype"]),
                                     key=f"{prefix}-m-dtype")
    values["device_tflops"] = right.number_input("achieved TFLOP/s", 0.001, 1e5, defaults["device_tflops"],
                                                 key=f"{prefix}-m-tflops")
    values["link_bandwidth_gbps"] = left.number_input("link GB/s", 0.001, 1e5, defaults["link_bandwidth_gbps"],
                                                      key=f"{prefix}-m-bw")
    values["link_latency_ms"] = right.number_input("link latency (ms)", 0.0, 1e4, defaults["link_latency_ms"],
                                                   format="%.3f", key=f"{prefix}-m-lat")
    return values


def run_cost_files() -> list[str]:
    root = runs_root()
    if not root.is_dir():
        return []
    return sorted((str(p) for p in root.glob("*/cost.json")), reverse=True)


def _cost_file_fields(prefix: str) -> dict[str, Any]:
    upload = st.file_uploader("Upload a cost.json", type=["json"], key=f"{prefix}-cost-upload")
    found = run_cost_files()
    picked = st.selectbox("…or pick one from a profile run", ["(none)", *found], key=f"{prefix}-cost-pick",
                          help=f"cost.json files under {runs_root()}/")
    if upload is not None:
        return {"text": upload.getvalue().decode("utf-8", errors="replace"), "origin": upload.name}
    if picked != "(none)":
        return {"path": picked, "origin": picked}
    return {}


def cost_model(spec: dict[str, Any]) -> CostModel:
    """The CostModel a spec describes; ValueError names the field at fault."""
    source, recompute = spec["source"], bool(spec.get("recompute"))
    if source == "Uniform":
        return cost_from_times([spec["forward_ms"]], [spec["backward_ms"]], [spec["weight_ms"]], [spec["comm_ms"]],
                               activation_bytes=[spec["activation_mib"] * MIB], recompute=recompute)
    if source == "Per stage":
        table: pd.DataFrame = spec["table"]
        columns = {}
        for name in ("forward_ms", "backward_ms", "weight_ms", "activation_mib"):
            values = pd.to_numeric(table[name], errors="coerce")
            if values.isna().any():
                row = int(values.isna().to_numpy().argmax())
                raise ValueError(f"per-stage table, stage {row}: {name} is empty or not a number")
            columns[name] = [float(v) for v in values]
        return cost_from_times(columns["forward_ms"], columns["backward_ms"], columns["weight_ms"], [spec["comm_ms"]],
                               activation_bytes=[v * MIB for v in columns["activation_mib"]], recompute=recompute)
    if source == "Model":
        return ModelDescription(**spec["model"]).to_cost_model(spec["num_stages"], recompute=recompute)
    if "text" in spec:
        try:
            data = json.loads(spec["text"])
        except json.JSONDecodeError as error:
            raise ValueError(f"{spec['origin']}: not valid JSON ({error})") from None
        return cost_from_dict(data).with_recompute(recompute)
    if "path" in spec:
        return load_cost(spec["path"]).with_recompute(recompute)
    raise ValueError("no cost file chosen: upload a cost.json, or pick one written by a profile run "
                     "(Run page, 'profile first')")


# --- downloads ----------------------------------------------------------------------------

def figure_downloads(fig: go.Figure, name: str, key: str, sig: str) -> None:
    """HTML at once (built on click); PNG/SVG/PDF only when asked, since Chromium takes seconds."""
    from pipesim import export

    with st.popover("Export chart", icon=":material/download:"):
        st.download_button("Interactive HTML", data=lambda: export.html_bytes(fig), file_name=f"{name}.html",
                           mime="text/html", on_click="ignore", key=f"{key}-html", width="stretch")
        stored = st.session_state["exports"].get(key)
        if stored is None or stored[0] != sig:
            if st.button("Prepare PNG, SVG and PDF", key=f"{key}-prepare", width="stretch"):
                with st.spinner("Rendering images in Chromium…"):
                    try:
                        files: dict[str, bytes] | str = export.export_figures([fig], export.IMAGE_FORMATS)[0]
                    except export.ExportUnavailable as error:
                        files = str(error)
                stored = (sig, files)
                st.session_state["exports"][key] = stored
        if stored is not None and stored[0] == sig:
            files = stored[1]
            if isinstance(files, str):
                st.warning(files)
            else:
                for fmt, data in files.items():
                    st.download_button(fmt.upper(), data=data, file_name=f"{name}.{fmt}",
                                       mime=export.MIME_TYPES[fmt], on_click="ignore", key=f"{key}-{fmt}",
                                       width="stretch")


def data_downloads(timeline: Timeline, schedule: Schedule | None, metrics: Metrics | None, name: str, key: str) -> None:
    """Timeline JSON, schedule CSV (torch's format) and a Chrome trace for Perfetto; built on click."""
    summary = metrics.to_dict() if metrics is not None else None
    columns = st.columns(3)
    columns[0].download_button(
        "Timeline JSON", data=lambda: json.dumps(formats.timeline_to_dict(timeline, summary), indent=1),
        file_name=f"{name}-timeline.json", mime="application/json", on_click="ignore", key=f"{key}-tl",
        icon=":material/data_object:")
    if schedule is not None:
        columns[1].download_button(
            "Schedule CSV (torch)", data=lambda: formats.schedule_to_csv(schedule), file_name=f"{name}.csv",
            mime="text/csv", on_click="ignore", key=f"{key}-csv", icon=":material/table:")
    columns[2].download_button(
        "Chrome trace (Perfetto)", data=lambda: json.dumps(formats.timeline_to_chrome_trace(timeline)),
        file_name=f"{name}-trace.json", mime="application/json", on_click="ignore", key=f"{key}-trace",
        icon=":material/timeline:")


def metric_cards(metrics: Metrics, max_rank_cards: int = 8) -> None:
    """Headline numbers, then each rank's bubble and peak activation memory."""
    peak = max(metrics.ranks, key=lambda r: r.peak_activation_bytes)
    top = st.columns(4)
    top[0].metric("Makespan", f"{metrics.makespan:,.3f} ms")
    top[1].metric("Bubble fraction", f"{metrics.bubble_fraction:.1%}", help="idle / (ranks × makespan)")
    top[2].metric("Bubble ratio", f"{metrics.bubble_ratio:.3f}", help="idle / busy")
    top[3].metric("Peak activations", format_bytes(peak.peak_activation_bytes),
                  help=f"highest on rank {peak.rank}: {peak.peak_activations} microbatches stashed")
    if len(metrics.ranks) <= max_rank_cards:
        cards = st.columns(len(metrics.ranks))
        for card, rank in zip(cards, metrics.ranks, strict=True):
            card.metric(f"Rank {rank.rank} peak", format_bytes(rank.peak_activation_bytes),
                        f"{rank.peak_activations} stashed · idle {rank.bubble_fraction:.0%}", delta_color="off",
                        delta_arrow="off")
    else:
        st.dataframe(pd.DataFrame([{
            "rank": r.rank, "bubble": r.bubble_fraction, "peak stashed": r.peak_activations,
            "peak memory": format_bytes(r.peak_activation_bytes)} for r in metrics.ranks]),
            hide_index=True, width="stretch")


def show_error(error: Exception, what: str = "") -> None:
    """A plain message for bad input: no traceback, the problem and the valid choices."""
    st.error(f"{what}{': ' if what else ''}{error}", icon=":material/error:")


# --- earlier runs -------------------------------------------------------------------------

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

    from executor.run_folder import list_runs

    rows = []
    for result in list_runs(Path(root)):
        config = result.config
        rows.append({
            "folder": result.run_dir.name,
            "status": result.status,
            "schedule": result.schedule.name if result.schedule is not None else None,
            "ranks": config.pipeline.num_ranks if config is not None else None,
            "microbatches": config.pipeline.num_microbatches if config is not None else None,
            "measured step (ms)": result.measured_step_ms,
            "predicted step (ms)": result.predicted_step_ms,
            "error": result.prediction_error,
            "started": datetime.datetime.fromtimestamp(result.started_at) if result.started_at else None,
            "message": result.message,
        })
    return rows


def run_list(root: str) -> list[dict[str, Any]]:
    """Earlier runs under `root`, newest first, as table rows (re-read only when a folder changes)."""
    return _run_rows(root, _runs_stamp(Path(root)))
