"""The Run page's form: what to run, on what model and devices, and the run config it describes.

`draw` shows the form in the sidebar and hands back the values of a submitted form (`RunRequest`); the
request's `config()` is the one place the page turns them into an `pipesim_executor.config.RunConfig` (whose checks
refuse bad values with a ValueError the page shows). Which knobs a run takes is the executor's config's
(`PipelineConfig`'s fields: offload, and sequence chunks where it has them), and whether it runs a family with these
settings is its own check (`pipesim_executor.host.checks.check_schedule`): its one-line refusal is shown under the
schedule before Launch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import streamlit as st

from app_pages.parts import schedule_inputs, schedule_knobs, state
from app_pages.parts.cached import HASH_FUNCS
from app_pages.parts.run import own_model
from pipesim.cost import TransformerShape
from pipesim.form_fields import form_fields
from pipesim.ir import Schedule
from pipesim.schedules import options_for, schedule_info
from pipesim_executor.config import (
    BACKENDS,
    DEVICES,
    DTYPES,
    MODEL_KINDS,
    SMALL_TRANSFORMER,
    CNNConfig,
    ModelConfig,
    PipelineConfig,
    RunConfig,
    run_config,
)
from pipesim_executor.seq_cut import data_microbatches

# Size presets of the built-in models (their configs' own types); the number of layers (blocks) is a separate
# input because it must be at least the number of stages.
TRANSFORMER_SIZES = {
    "tiny": TransformerShape(num_layers=4, hidden_size=64, ffn_size=256, num_heads=4, seq_len=32, vocab_size=512),
    "small": SMALL_TRANSFORMER,
    "medium": TransformerShape(num_layers=4, hidden_size=256, ffn_size=1024, num_heads=8, seq_len=128, vocab_size=4000),
}
CNN_SIZES = {
    "tiny": CNNConfig(channels=16, fc_size=128),
    "small": CNNConfig(channels=32, fc_size=256),
    "medium": CNNConfig(channels=64, fc_size=512),
}
CUSTOM = state.CUSTOM_SCHEDULE_LABEL
# The pipeline settings a run takes, as the executor's `run` flags are made: the offload, and the sequence chunks
# and cut once the executor runs them.
PIPELINE = {field.name: field for field in form_fields(PipelineConfig)}


@dataclass(frozen=True)
class RunRequest:
    """A submitted form's values, as the widgets gave them."""

    name: str
    ranks: int
    microbatches: int
    chunks: int
    kind: str
    size: str
    layers: int
    own: str
    replicas: int
    dtype: str
    batch: int
    steps: int
    warmup: int
    timeout: float
    device: str
    backend: str
    profile: bool
    reference: bool
    recompute: bool
    knobs: schedule_knobs.Knobs = schedule_knobs.Knobs()

    def schedule(self, custom: Schedule | None) -> Schedule | None:
        """The custom schedule sent from the Custom page when it is the one chosen, else None (a registered one)."""
        return custom if self.name == CUSTOM else None

    def config(self, custom: Schedule | None) -> RunConfig:
        """The run config these values describe; ValueError (the configs' own checks) on bad ones."""
        sent = self.schedule(custom)
        model = (
            own_model.custom_model_config(self.own.strip())
            if self.own.strip()
            else ModelConfig(
                kind=self.kind,
                transformer=replace(TRANSFORMER_SIZES[self.size], num_layers=int(self.layers)),
                cnn=replace(CNN_SIZES[self.size], blocks=int(self.layers)),
            )
        )
        options: dict[str, Any] = {} if sent else options_for(self.name, num_virtual_stages=int(self.chunks))
        taken = {} if sent else self.knobs.build_options(schedule_info(self.name))  # the sequence chunks
        return run_config(
            **{name: value for name, value in taken.items() if name in PIPELINE},
            offload=self.knobs.offload,
            schedule=sent.name if sent else self.name,
            num_ranks=sent.num_ranks if sent else int(self.ranks),
            num_microbatches=data_microbatches(sent) if sent else int(self.microbatches),  # chunks, directions
            num_virtual_stages=options.get("num_virtual_stages"),
            model=model,
            data_parallel=int(self.replicas),
            dtype=self.dtype,
            batch_size=int(self.batch),
            steps=int(self.steps),
            warmup_steps=int(self.warmup),
            recompute=self.recompute,
            device=self.device,
            backend=self.backend,
            profile=self.profile,
            reference=self.reference,
            timeout_s=float(self.timeout),
        )


def draw(custom: Schedule | None, running: bool, waits: str | None = None) -> RunRequest | None:
    """The form in the sidebar; the request when it was submitted (and no run is going), else None. `waits`: why
    Launch must wait (another job holds the machine), said under the button, which is off meanwhile.

    The schedule, ranks, microbatches and chunks are the ones every page shares (what Simulate drew is what
    runs); the rest is the Run page's own, in the URL like every page's settings."""
    with st.sidebar:
        use_custom = custom is not None and st.toggle(
            "Run the custom schedule",
            value=True,
            key="run-use-custom",
            help=f"The schedule sent from the Custom page ({custom.describe()}); off: a registered one",
        )
        name = CUSTOM if use_custom else schedule_inputs.schedule_picker(disabled=running)
        info = None if use_custom else schedule_info(name)
        refused = st.empty()  # the executor's refusal of this family with these settings, once the form is read
    with st.sidebar, st.form("run-form"):
        if use_custom:
            st.caption(f"The custom schedule sets its own ranks and microbatches: {custom.describe()}")
            ranks, microbatches, chunks = custom.num_ranks, custom.num_microbatches, state.DEFAULT_CHUNKS
        else:
            ranks, microbatches, chunks = schedule_inputs.size_fields(schedule_inputs.chunks_unused(info))
        kind = st.selectbox("Model", MODEL_KINDS, key=state.kept("run-model"), bind=state.URL)
        size = st.selectbox(  # full width: in a half column of the sidebar "medium" read "mediun"
            "Size",
            list(TRANSFORMER_SIZES),
            index=1,
            key=state.kept("run-size"),
            bind=state.URL,
            help="tiny runs are dominated by Python overhead per action; small and up "
            "are what the profile-then-predict figures in docs/benchmarks.md use",
        )
        left, right = st.columns(2)
        layers = left.number_input(
            "Layers / blocks",
            1,
            256,
            4,
            key=state.kept("run-layers"),
            bind=state.URL,
            help="Transformer blocks (CNN: conv blocks). Stages share out these plus the "
            "embedding and output layer (CNN: 3 FC layers): at least one per stage",
        )
        replicas = right.number_input(
            "Data parallel",
            1,
            16,
            1,
            key=state.kept("run-data-parallel"),
            bind=state.URL,
            help="Replicas of the pipeline: ranks x this many processes",
        )
        dtype = st.selectbox(
            "Precision",
            DTYPES,
            key=state.kept("run-dtype"),
            bind=state.URL,
            help="bf16: autocast, fp32 master weights",
        )
        own = st.text_input(
            "Your own model (optional)",
            key=state.kept("run-model-spec"),
            placeholder=own_model.placeholder(),
            help=own_model.field_help(),
        )
        left, right = st.columns(2)
        batch = left.number_input(
            "Batch size",
            1,
            4096,
            32,
            key=state.kept("run-batch"),
            bind=state.URL,
            help="Per step; split into the microbatches",
        )
        steps = right.number_input(
            "Steps", 1, 1000, 5, key=state.kept("run-steps"), bind=state.URL, help="Measured steps"
        )
        warmup = left.number_input("Warm-up steps", 0, 100, 1, key=state.kept("run-warmup"), bind=state.URL)
        timeout = right.number_input("Timeout (s)", 10, 7200, 600, key=state.kept("run-timeout"), bind=state.URL)
        device = left.selectbox(
            "Device",
            DEVICES,
            key=state.kept("run-device"),
            bind=state.URL,
            help="auto: CUDA when torch sees GPUs, otherwise CPU",
        )
        backend = right.selectbox(
            "Backend",
            BACKENDS,
            key=state.kept("run-backend"),
            bind=state.URL,
            help="auto: gloo on CPU; nccl with one GPU per rank, else staged",
        )
        profile = st.toggle(
            "Profile first, then predict",
            value=True,
            key=state.kept("run-profile"),
            bind=state.URL,
            help="Measure per-stage costs, write cost.json and simulate the step with them",
        )
        reference = st.toggle(
            "Also run torch's own schedule",
            key=state.kept("run-reference"),
            bind=state.URL,
            help="The same model on torch.distributed.pipelining's own schedule class, for comparison",
        )
        recompute = st.toggle("Activation recomputation", key=state.kept("run-recompute"), bind=state.URL)
        problems: list[str] = []
        chunked = info if "seq_chunks" in PIPELINE else None  # sequence chunks only once the executor runs them
        knobs = schedule_knobs.run_fields(chunked, problems, PIPELINE["offload"].help)
        held = running or waits is not None
        submitted = st.form_submit_button("Launch run", type="primary", disabled=held, width="stretch")
        if waits is not None and not running:
            st.caption(waits)
    request = RunRequest(
        name, ranks, microbatches, chunks, kind, size, layers, own, replicas, dtype, batch, steps, warmup,
        timeout, device, backend, profile, reference, recompute, knobs,
    )  # fmt: skip
    if problems:  # a field out of range: said under it, and nothing launches
        refused.warning(f"**Not launched**: {'; '.join(problems)}.", icon=":material/error:")
        return None
    reason = None if running else refusal(request, custom)
    if reason is not None:
        refused.warning(f"**The executor refuses this run**: {reason}", icon=":material/block:")
    if not submitted or held:
        return None
    return request


def refusal(request: RunRequest, custom: Schedule | None) -> str | None:
    """Why the executor would refuse to run this schedule with these settings, in its own one line, or None."""
    try:
        return _schedule_refusal(request.config(custom), request.schedule(custom))
    except ValueError as error:  # the configs' own checks of the values
        return str(error)


@st.cache_data(max_entries=32, show_spinner=False, hash_funcs={**HASH_FUNCS, RunConfig: hash})
def _schedule_refusal(config: RunConfig, schedule: Schedule | None) -> str | None:
    from pipesim_executor.host.checks import check_schedule

    try:
        check_schedule(config, schedule)
    except ValueError as error:  # refused, named as `executor run` names it
        return str(error)
    return None
