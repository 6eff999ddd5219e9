"""Plan: which schedule, microbatch size, chunks and recomputation for this model on these devices, under a cap.

The search, the memory model and the balancing are pipesim's (pipesim.plan); a real check of the top candidates
is the executor's (executor.verify), run as separate processes.
"""

import json

import pandas as pd
import streamlit as st

from app_pages import cached, plot, state, widgets
from executor.host import verify
from pipesim.charts import plan as charts_plan
from pipesim.cost.balance import balance, format_split_points
from pipesim.cost.description import DTYPE_BYTES, ModelDescription
from pipesim.io import formats
from pipesim.plan.report import best_candidate, pareto_front, plan_document, ranked, summary_lines, torchtitan_settings
from pipesim.plan.search import PlanInputs, PlanSpace
from pipesim.schedules import schedule_names
from pipesim.sim.memory import rank_memory
from pipesim.units import format_bytes

state.init_state()
st.session_state.setdefault("plan_verification", None)  # (plan signature, executor.verify.Verification)
st.title("Plan a pipeline")
st.caption(
    "Searches schedules, microbatch sizes, chunks per rank, recomputation and W shares for one model on "
    "your devices; each candidate is simulated exactly with balanced stages and its full memory "
    "(parameters, gradients, optimizer state, stashed activations). Verify runs the top ones for real."
)


def _numbers(text: str, kind: type, label: str) -> tuple:
    try:
        values = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{label}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{label}: give at least one value")
    return values


with st.sidebar, st.form("plan-form"):
    st.markdown("**Model** (decoder-only Transformer)")
    left, right = st.columns(2)
    layers = left.number_input("Layers", 1, 512, 8, key="plan-layers")
    hidden = right.number_input("Hidden size", 8, 65536, 1024, step=64, key="plan-hidden")
    ffn = left.number_input("FFN size", 8, 262144, 4096, step=64, key="plan-ffn")
    heads = right.number_input("Heads", 1, 512, 16, key="plan-heads")
    seq_len = left.number_input("Sequence length", 1, 1 << 20, 1024, key="plan-seq")
    vocab = right.number_input("Vocabulary", 1, 1 << 22, 32000, key="plan-vocab")
    dtype = left.selectbox("dtype", list(DTYPE_BYTES), index=list(DTYPE_BYTES).index("bf16"), key="plan-dtype")
    tflops = right.number_input("Achieved TFLOP/s", 0.001, 10000.0, 200.0, key="plan-tflops")
    st.markdown("**Devices and batch**")
    left, right = st.columns(2)
    devices = left.number_input("Devices", 1, state.MAX_RANKS, 4, key="plan-devices")
    batch = right.number_input("Global batch", 1, 4096, 32, key="plan-batch")
    cap_gib = left.number_input("Memory cap (GiB)", 0.0, 4096.0, 40.0, key="plan-cap", help="0: no cap")
    optimizer = right.selectbox("Optimizer", ["adam", "sgd-momentum", "sgd"], key="plan-optimizer")
    st.markdown("**Search**")
    names = st.multiselect(
        "Schedules", schedule_names(), default=["1f1b", "interleaved-1f1b", "zb-h1", "zbv"], key="plan-schedules"
    )
    sizes_text = st.text_input("Microbatch sizes", "1,2,4", key="plan-mbs")
    chunks_text = st.text_input("Chunks per rank", "2", key="plan-chunks", help="for interleaved-1f1b, looped-bfs")
    recompute = st.segmented_control("Recompute", ["off", "on", "both"], default="both", key="plan-recompute")
    shares_text = st.text_input(
        "W shares",
        "",
        key="plan-shares",
        help="weight part of the backward, e.g. 0.4,0.5; empty: the model's own (half)",
    )
    st.form_submit_button("Plan", type="primary", width="stretch")

try:
    description = ModelDescription(
        num_layers=int(layers),
        hidden_size=int(hidden),
        ffn_size=int(ffn),
        num_heads=int(heads),
        seq_len=int(seq_len),
        vocab_size=int(vocab),
        dtype=dtype,
        device_tflops=float(tflops),
    )
    cap = float(cap_gib) * 2**30 or None
    inputs = PlanInputs.from_description(
        description, devices=int(devices), global_batch=int(batch), memory_cap_bytes=cap, optimizer=optimizer
    )
    shares = _numbers(shares_text, float, "W shares") if shares_text.strip() else (None,)
    space = PlanSpace(
        schedules=tuple(names),
        microbatch_sizes=_numbers(sizes_text, int, "Microbatch sizes"),
        chunks=_numbers(chunks_text, int, "Chunks per rank"),
        recompute={"off": (False,), "on": (True,)}.get(recompute or "both", (False, True)),
        w_shares=shares,
    )
    with st.spinner("Evaluating candidates…"):
        candidates = cached.plan(inputs, space)
except ValueError as error:
    widgets.show_error(error, "Cannot plan")
    st.stop()

front, best = pareto_front(candidates), best_candidate(candidates)
order = ranked(candidates)
lines = summary_lines(candidates, cap)
st.markdown("\n".join(f"- {line.strip()}" for line in lines))
failed = [c for c in candidates if c.error is not None]
if failed:
    with st.expander(f"{len(failed)} candidates cannot be built"):
        st.dataframe(pd.DataFrame([{"candidate": c.label, "why": c.error} for c in failed]), hide_index=True)
if not order:
    st.stop()

labels = [c.label for c in order]
selected_label = st.selectbox(
    "Candidate",
    labels,
    index=0,
    key="plan-selected",
    help="fitting candidates fastest first; the first is the recommendation",
)
selected = order[labels.index(selected_label)]
figure = charts_plan.pareto_figure(candidates, front, best, cap, selected)
plot.show(figure, "plan-pareto")

on_front = {id(c) for c in front}
table = pd.DataFrame(
    [
        {
            "candidate": c.label,
            "step ms": round(c.step_ms, 4),
            "samples/s": round(c.throughput, 3),
            "peak memory": format_bytes(c.peak_memory_bytes),
            "fits": c.fits,
            "Pareto": id(c) in on_front,
            "bubble": f"{c.bubble_fraction:.1%}",
            "imbalance": round(c.imbalance, 3),
            "split": ",".join(map(str, c.split)),
        }
        for c in order
    ]
)
st.dataframe(table, hide_index=True, key="plan-table", height=260)

schedule, cost = cached.plan_candidate(inputs, selected)
st.subheader(selected.label)
st.caption(
    f"Split points (executor --split-points): {','.join(map(str, selected.split)) or '-'}; fullest device "
    f"{format_bytes(selected.peak_memory_bytes)} (parameters, gradients and {optimizer} state included)."
)
plot.show(cached.gantt_chart(schedule, cost), "plan-gantt")
plot.show(cached.memory_chart(schedule, cost), "plan-memory")
parts = charts_plan.memory_parts_figure(
    rank_memory(schedule, cost, optimizer), cap, f"{selected.label}: memory per rank at its peak"
)
plot.show(parts, "plan-memory-parts")

csv_name = f"{schedule.name}-p{selected.ranks}-m{selected.microbatches}.csv"
settings = torchtitan_settings(selected, csv_name, description.num_layers)
columns = st.columns(3)
columns[0].download_button(
    "Schedule CSV (torch compute_only)",
    data=formats.schedule_to_csv(schedule),
    file_name=csv_name,
    mime="text/csv",
    on_click="ignore",
    key="plan-csv",
)
columns[1].download_button(
    "torchtitan settings (JSON)",
    data=json.dumps(settings, indent=1),
    file_name="torchtitan-pipeline.json",
    mime="application/json",
    on_click="ignore",
    key="plan-titan",
)
recorded = {
    "devices": int(devices),
    "global_batch": int(batch),
    "memory_cap_bytes": cap,
    "optimizer": optimizer,
    "model": vars(description),
}
document = plan_document(candidates, recorded, cap)
columns[2].download_button(
    "Plan JSON",
    data=lambda: json.dumps(document, indent=1),
    file_name="plan.json",
    mime="application/json",
    on_click="ignore",
    key="plan-json",
)

with st.expander("Balance stages on their own"):
    st.caption(
        "Per-layer (unit) times in ms, comma-separated; the split that makes the slowest stage fastest, as "
        "`executor run --split-points` takes it."
    )
    left, right = st.columns([3, 1])
    layer_text = left.text_input("Layer times (ms)", "1,4,4,4,4,6", key="plan-balance-layers")
    stage_count = right.number_input("Stages", 1, 512, 2, key="plan-balance-stages")
    try:
        balanced = balance(_numbers(layer_text, float, "Layer times"), int(stage_count))
        st.code(f"--split-points {format_split_points(balanced.split_points)}", language=None)
        st.caption(
            f"Per-stage times {', '.join(f'{c:.4g}' for c in balanced.stage_costs)} ms; slowest "
            f"{balanced.bottleneck:.4g} ms, {balanced.imbalance:.3f}x the mean."
        )
    except ValueError as error:
        widgets.show_error(error, "Cannot balance")

st.subheader("Verify for real")
st.caption(
    "Runs the top K candidates one after another with the executor on this machine (CPU here, a GPU where "
    "there is one), and compares predicted with measured step times. Use a small model: every run trains it."
)
left, right = st.columns(2)
top = left.number_input("Top K", 1, 10, 2, key="plan-top")
steps = right.number_input("Steps per run", 1, 50, 3, key="plan-steps")
sig = state.signature(hash(inputs), hash(space))
if st.button("Verify the top candidates", key="plan-verify", icon=":material/play_circle:"):
    folder = state.runs_root() / "plans"
    path = folder / f"plan-{sig}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        formats.write_json(document, path)
        with st.spinner(f"Running the top {int(top)} candidates…"):
            result = verify.verify_plan(path, int(top), runs_root=state.runs_root(), steps=int(steps))
        st.session_state["plan_verification"] = (sig, result)
    except (ValueError, OSError) as error:
        widgets.show_error(error, "Cannot verify")
stored = st.session_state["plan_verification"]
if stored is not None and stored[0] == sig:
    result = stored[1]
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "candidate": r.label,
                    "predicted ms": r.predicted_ms,
                    "measured ms": r.measured_ms,
                    "error": r.error or "",
                }
                for r in result.rows
            ]
        ),
        hide_index=True,
    )
    rho = "-" if result.spearman is None else f"{result.spearman:+.2f}"
    gap = "-" if result.recommended_gap is None else f"{result.recommended_gap:+.1%}"
    cards = st.columns(2)
    cards[0].metric("Rank correlation (Spearman)", rho)
    cards[1].metric("Recommended vs measured best", gap, help=f"measured best: {result.measured_best}")
