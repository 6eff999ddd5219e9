"""The knobs of the schedules that hold more than compute (activation offload, sequence chunks, an MoE stage's
all-to-all), one expander in a page's form, every value in the URL. The page builds and prices with them as
`pipesim simulate --offload --host-gbps --host-latency --seq-chunks --seq-cut --a2a --moe-layers
--attention-fraction` does."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import streamlit as st

from app_pages.parts import fields, state
from pipesim.api import OFFLOAD_MODES, with_offload
from pipesim.cost import CostModel, LinkCost
from pipesim.ir import SEQ_CUTS, Schedule
from pipesim.schedules import ScheduleInfo

OFFLOAD, HOST_GBPS, HOST_LATENCY = "knob-offload", "knob-host-gbps", "knob-host-lat"
SEQ_CHUNKS, SEQ_CUT, ATTENTION = "knob-seq", "knob-seq-cut", "knob-attn"
A2A, MOE_LAYERS = "knob-a2a", "knob-moe"
MAX_SEQ_CHUNKS, MAX_MOE_LAYERS = 16, 64
KNOB_KEYS = ("OFFLOAD", "HOST_GBPS", "HOST_LATENCY", "SEQ_CHUNKS", "SEQ_CUT", "ATTENTION", "A2A", "MOE_LAYERS")


@dataclass(frozen=True)
class Knobs:
    """What the expander set; `build_options`, `priced` and `placed` apply it as the CLI's flags do."""

    offload: str = "none"
    host_gbps: float = 0.0  # 0: unlimited
    host_latency_ms: float = 0.0
    seq_chunks: int = 2
    seq_cut: str = "even"
    attention_fraction: float = 0.0
    a2a_ms: float = 0.0
    moe_layers: int = 1

    def options(self) -> dict[str, object]:
        """The build options these knobs offer (seq1f1b's chunks and cut), for whichever family takes them."""
        return {"seq_chunks": self.seq_chunks, "seq_cut": self.seq_cut}

    def build_options(self, info: ScheduleInfo) -> dict[str, object]:
        """The options a family takes among these."""
        return {key: value for key, value in self.options().items() if key in info.options}

    def priced(self, cost: CostModel) -> CostModel:
        """The cost model with the host link, attention's share and each stage's all-to-all."""
        link = LinkCost(self.host_latency_ms, self.host_gbps if self.host_gbps > 0 else float("inf"))
        stages = cost.stages
        if self.a2a_ms or self.moe_layers != 1:
            stages = tuple(dataclasses.replace(s, a2a_ms=self.a2a_ms, moe_layers=self.moe_layers) for s in stages)
        return dataclasses.replace(cost, stages=stages, host_link=link, attention_fraction=self.attention_fraction)

    def placed(self, schedule: Schedule, cost: CostModel) -> Schedule:
        """The schedule with its OFFLOADs and RELOADs (selective weighs each wait against `cost`)."""
        return with_offload(schedule, self.offload, cost)


OFFLOAD_HELP = (
    "Saved activations to host memory after each forward and back before its backward, on the copy engine (full: "
    "every microbatch that waits; selective: only where the wait hides the copies)"
)


def _offload_field(help_text: str = OFFLOAD_HELP) -> str:
    return str(
        st.selectbox("Activation offload", OFFLOAD_MODES, key=state.kept(OFFLOAD), bind=state.URL, help=help_text)
    )


def _sequence_fields(left, right, infos: Iterable[ScheduleInfo], problems: list[str]) -> tuple[int, str]:
    """The sequence chunks and their cut, open where one of `infos` takes them (seq1f1b)."""
    takes_chunks = any("seq_chunks" in info.options for info in infos)
    chunks = fields.number(
        left,
        "Sequence chunks",
        1,
        MAX_SEQ_CHUNKS,
        2,
        problems,
        key=state.kept(SEQ_CHUNKS),
        bind=state.URL,
        disabled=not takes_chunks,
        help="Chunks per microbatch (seq1f1b)",
    )
    cut = right.selectbox(
        "Sequence cut",
        SEQ_CUTS,
        key=state.kept(SEQ_CUT),
        bind=state.URL,
        disabled=not takes_chunks,
        help="Even tokens, or balanced compute (seq1f1b)",
    )
    return int(chunks or 2), str(cut)


def run_fields(info: ScheduleInfo | None, problems: list[str], offload_help: str) -> Knobs:
    """The knobs a real run takes (offload, and the sequence chunks where the family takes them), with the same
    keys as Simulate's: what Simulate drew is what runs. The rest price a simulation and keep their defaults."""
    with st.expander("Offload, sequence chunks", expanded=False):
        offload = _offload_field(offload_help)
        left, right = st.columns(2)
        chunks, cut = _sequence_fields(left, right, [info] if info is not None else [], problems)
    return Knobs(offload=offload, seq_chunks=chunks, seq_cut=cut)


def knob_fields(infos: Iterable[ScheduleInfo], problems: list[str]) -> Knobs:
    """The expander: offload for any family, the sequence chunks where one of `infos` takes them, the all-to-all."""
    with st.expander("Offload, sequence chunks, MoE all-to-all", expanded=False):
        offload = _offload_field()
        left, right = st.columns(2)
        gbps = fields.number(
            left,
            "Host GB/s",
            0.0,
            1e5,
            0.0,
            problems,
            key=state.kept(HOST_GBPS),
            bind=state.URL,
            help="Bandwidth to host memory (0: unlimited)",
        )
        latency = fields.number(
            right,
            "Copy latency ms",
            0.0,
            1e4,
            0.0,
            problems,
            key=state.kept(HOST_LATENCY),
            bind=state.URL,
            help="Fixed time of each OFFLOAD or RELOAD",
        )
        chunks, cut = _sequence_fields(left, right, infos, problems)
        attention = fields.number(
            left,
            "Attention share",
            0.0,
            1.0,
            0.0,
            problems,
            key=state.kept(ATTENTION),
            bind=state.URL,
            help="Attention's share of a sequence's compute",
        )
        a2a = fields.number(
            right,
            "All-to-all ms",
            0.0,
            1e6,
            0.0,
            problems,
            key=state.kept(A2A),
            bind=state.URL,
            help="One dispatch (or combine) of a microbatch through a stage",
        )
        layers = fields.number(
            left,
            "MoE layers",
            1,
            MAX_MOE_LAYERS,
            1,
            problems,
            key=state.kept(MOE_LAYERS),
            bind=state.URL,
            help="How finely an overlapped pair interleaves",
        )
    return Knobs(
        offload=offload,
        host_gbps=float(gbps or 0.0),
        host_latency_ms=float(latency or 0.0),
        seq_chunks=chunks,
        seq_cut=cut,
        attention_fraction=float(attention or 0.0),
        a2a_ms=float(a2a or 0.0),
        moe_layers=int(layers or 1),
    )
