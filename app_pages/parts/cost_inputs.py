"""The cost inputs several pages share: pick a source (uniform, per stage, model, cost file), fill its fields.

The widgets produce a plain spec; `cost_model` hands it to pipesim's converters (`cost_from_times`,
`ModelDescription`, the cost file reader), which name the field at fault when a value is wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import streamlit as st

from app_pages.parts import fields
from app_pages.parts.state import COST, URL, kept, runs_root
from pipesim.cost import DTYPE_BYTES, CostModel, ModelDescription, cost_from_times
from pipesim.io import cost_from_dict, load_cost, parse_bounded_json
from pipesim.limits import MAX_COST_BYTES, MAX_COST_VALUES

if TYPE_CHECKING:  # pandas only for the per-stage table: half a second of a cold start otherwise
    import pandas as pd

COST_SOURCES = ("Uniform", "Per stage", "Model", "Cost file")
MIB = 2**20
# One meaning of the uniform times on every page (Simulate, Compare), pipesim's (CostModel.for_pipeline), as the
# command line's simulate and compare read them.
COST_MEANING = (
    "Uniform times describe the model cut into one stage per rank. A schedule that holds several "
    "chunks per rank (interleaved, V shapes) runs the same model cut finer: each chunk takes its "
    "share of the time and memory, so every schedule trains the same model. A per-stage table, a "
    "model description and a cost file give each stage its own figures."
)


def cost_source_picker(sources: Sequence[str] = COST_SOURCES) -> str:
    """Outside the form, so choosing a source swaps the fields at once. One choice for every page (state.COST)."""
    return st.radio(
        "Cost source",
        sources,
        key=kept(f"{COST}-source"),
        horizontal=True,
        bind=URL,
        help="Uniform numbers, a per-stage table, a model description, or a cost file "
        "written by a profile run (runs/*/cost.json)",
    )


def stage_table_default(num_stages: int) -> pd.DataFrame:
    """A starting table: the last stage heavier (it holds the output layer and the loss)."""
    import pandas as pd

    heavy = [1.5 if s == num_stages - 1 else 1.0 for s in range(num_stages)]
    return pd.DataFrame(
        {
            "forward_ms": heavy,
            "backward_ms": [2 * f for f in heavy],
            "weight_ms": [f for f in heavy],
            "activation_mib": [1.0] * num_stages,
        },
        index=pd.Index([f"stage {s}" for s in range(num_stages)], name="stage"),
    )


def cost_fields(source: str, num_stages: int, w_unused: str | None = None) -> dict[str, Any]:
    """Draw the fields of one cost source (inside a form); returns a plain spec for `cost_model`.

    Every page shares these fields (their keys start with state.COST): the costs set on Simulate are those of
    Compare, Custom and the DAG. Uniform times are per rank (`COST_MEANING`): the pages cut them per chunk
    (`CostModel.for_pipeline`). `w_unused` says why the W share does not apply to what the page draws (a
    schedule that runs each backward whole): the field is then disabled with that reason.
    """
    prefix = COST
    spec: dict[str, Any] = {"source": source}
    problems: list[str] = []  # values out of range, each said under its field (app_pages.parts.fields)
    spec["problems"] = problems
    if source == "Uniform":
        left, right = st.columns(2)
        spec["forward_ms"] = fields.number(
            left, "F (ms)", 0.0, 1e6, 1.0, problems, step=0.1, key=kept(f"{prefix}-f"), bind=URL
        )
        spec["backward_ms"] = fields.number(
            right,
            "B (ms)",
            0.0,
            1e6,
            2.0,
            problems,
            step=0.1,
            key=kept(f"{prefix}-b"),
            bind=URL,
            help="The full backward; I and W split it",
        )
        spec["weight_ms"] = fields.number(
            left,
            "W (ms)",
            0.0,
            1e6,
            1.0,
            problems,
            step=0.1,
            key=kept(f"{prefix}-w"),
            bind=URL,
            disabled=w_unused is not None,
            help=w_unused
            or "The weight part of the backward (W, in ms, a part of B), which zero-bubble schedules run apart "
            "(I = B - W); above B is refused",
        )
        spec["comm_ms"] = fields.number(
            right,
            "Transfer (ms)",
            0.0,
            1e6,
            0.0,
            problems,
            step=0.05,
            key=kept(f"{prefix}-comm"),
            bind=URL,
            help="Per cross-rank send of an activation or gradient",
        )
        spec["activation_mib"] = fields.number(
            st,
            "Activations per microbatch, one rank's stage (MiB)",
            0.0,
            1e9,
            1.0,
            problems,
            key=kept(f"{prefix}-act"),
            bind=URL,
        )
    elif source == "Per stage":
        st.caption(f"One row per stage ({num_stages} stages).")
        spec["table"] = st.data_editor(
            stage_table_default(num_stages), key=f"{prefix}-stages-{num_stages}", num_rows="fixed", width="stretch"
        )
        spec["comm_ms"] = st.number_input(
            "Transfer (ms)", 0.0, 1e6, 0.0, 0.05, key=kept(f"{prefix}-stages-comm"), bind=URL
        )
    elif source == "Model":
        spec["model"] = _model_fields(prefix)
        spec["num_stages"] = num_stages
    else:
        spec.update(_cost_file_fields(prefix))
    spec["recompute"] = st.toggle(
        "Activation recomputation",
        key=kept(f"{prefix}-recompute"),
        bind=URL,
        help="Backward pays its forward again; only stage inputs stay stashed",
    )
    return spec


def _model_fields(prefix: str) -> dict[str, Any]:
    defaults = {f.name: f.default for f in dataclasses.fields(ModelDescription)}
    left, right = st.columns(2)
    values: dict[str, Any] = {}
    ints = ("num_layers", "hidden_size", "ffn_size", "num_heads", "seq_len", "microbatch_size")
    for i, name in enumerate(ints):
        column = left if i % 2 == 0 else right
        values[name] = column.number_input(
            name.replace("_", " "), 1, 10**7, defaults[name], key=kept(f"{prefix}-m-{name}"), bind=URL
        )
    values["dtype"] = left.selectbox(
        "dtype",
        list(DTYPE_BYTES),
        index=list(DTYPE_BYTES).index(defaults["dtype"]),
        key=kept(f"{prefix}-m-dtype"),
        bind=URL,
    )
    values["device_tflops"] = right.number_input(
        "achieved TFLOP/s", 0.001, 1e5, defaults["device_tflops"], key=kept(f"{prefix}-m-tflops"), bind=URL
    )
    values["link_bandwidth_gbps"] = left.number_input(
        "link GB/s", 0.001, 1e5, defaults["link_bandwidth_gbps"], key=kept(f"{prefix}-m-bw"), bind=URL
    )
    values["link_latency_ms"] = right.number_input(
        "link latency (ms)",
        0.0,
        1e4,
        defaults["link_latency_ms"],
        format="%.3f",
        key=kept(f"{prefix}-m-lat"),
        bind=URL,
    )
    return values


def run_cost_files() -> list[str]:
    root = runs_root()
    if not root.is_dir():
        return []
    return sorted((str(p) for p in root.glob("*/cost.json")), reverse=True)


def _cost_file_fields(prefix: str) -> dict[str, Any]:
    upload = st.file_uploader("Upload a cost.json", type=["json"], key=f"{prefix}-upload")
    found = run_cost_files()
    picked = st.selectbox(
        "…or pick one from a profile run",
        ["(none)", *found],
        key=kept(f"{prefix}-pick"),
        bind=URL,
        help=f"cost.json files under {runs_root()}/",
    )
    if upload is not None:
        return {"text": upload.getvalue().decode("utf-8", errors="replace"), "origin": upload.name}
    if picked != "(none)":
        return {"path": picked, "origin": picked}
    return {}


def cost_model(spec: dict[str, Any]) -> CostModel:
    """The CostModel a spec describes, per rank as the user gave it (the pages cut it for their schedule with
    `CostModel.for_pipeline`, once); ValueError names the field at fault."""
    source, recompute = spec["source"], bool(spec.get("recompute"))
    if source == "Uniform":
        return cost_from_times(
            [spec["forward_ms"]],
            [spec["backward_ms"]],
            [spec["weight_ms"]],
            [spec["comm_ms"]],
            activation_bytes=[spec["activation_mib"] * MIB],
            recompute=recompute,
        )
    if source == "Per stage":
        import pandas as pd

        table: pd.DataFrame = spec["table"]
        columns = {}
        for name in ("forward_ms", "backward_ms", "weight_ms", "activation_mib"):
            values = pd.to_numeric(table[name], errors="coerce")
            if values.isna().any():
                row = int(values.isna().to_numpy().argmax())
                raise ValueError(f"per-stage table, stage {row}: {name} is empty or not a number")
            columns[name] = [float(v) for v in values]
        return cost_from_times(
            columns["forward_ms"],
            columns["backward_ms"],
            columns["weight_ms"],
            [spec["comm_ms"]],
            activation_bytes=[v * MIB for v in columns["activation_mib"]],
            recompute=recompute,
        )
    if source == "Model":
        return ModelDescription(**spec["model"]).to_cost_model(spec["num_stages"], recompute=recompute)
    if "text" in spec:  # an upload, under a file's bounds (pipesim/limits.py)
        data = parse_bounded_json(spec["text"].encode(), spec["origin"], MAX_COST_BYTES, "cost file", MAX_COST_VALUES)
        return cost_from_dict(data).with_recompute(recompute)
    if "path" in spec:
        return load_cost(spec["path"]).with_recompute(recompute)
    raise ValueError(
        "no cost file chosen: upload a cost.json, or pick one written by a profile run (Run page, 'profile first')"
    )
