"""What the pipesim commands share: the usage error, the parser that raises it, argument types, the cost
flags and the cost model they describe, and the figure outputs (one kaleido session for images)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterable
from itertools import chain
from operator import is_, itemgetter
from pathlib import Path
from typing import TextIO

from pipesim.cost.convert import cost_from_times
from pipesim.cost.model import CostModel, LinkCost
from pipesim.flags import (  # noqa: F401 - the commands' parser and usage error, shared with the executor
    Parser,
    UsageError,
    float_flag,
    float_list_flag,
    int_flag,
    shown,
)
from pipesim.io.cost_file import load_cost
from pipesim.io.formats import STANDARD_OUTPUT, check_output, is_standard_output, write_file
from pipesim.ir import SEQ_CUTS, Schedule
from pipesim.limits import MAX_BYTES, MAX_TIME_MS, MIN_BANDWIDTH_GBPS, check_sizes
from pipesim.records import Timeline
from pipesim.sim.offload import OFFLOAD_MODES

FIGURE_FORMATS = ("html", "png", "svg", "pdf")


# --- argument types --------------------------------------------------------------------


positive_int = int_flag(minimum=1)  # counts: ranks, microbatches, replicas, steps (their upper limits: limits.py)
ms_list = float_list_flag(minimum=0, maximum=MAX_TIME_MS)  # one time in ms, or one per stage
bytes_list = float_list_flag(minimum=0, maximum=MAX_BYTES)  # gradient bytes, one value or one per stage


def name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated schedule names, e.g. 1f1b,zb-h1")
    return names


# --- parser ---------------------------------------------------------------------------


COST_MEANING = (
    "Times are ms per microbatch: one value, or a comma-separated list. One value, or one per rank, describes "
    "the model cut into one stage per rank; a schedule that holds several chunks per rank (interleaved, V "
    "shapes) runs the same model cut finer, each chunk taking its share of the time, the stash and the "
    "gradients (interleaved-1f1b on 4 ranks with 2 chunks: --f 1 is 0.5 ms per chunk). One value per stage is "
    "taken as given. simulate, compare and the app read costs so."
)


def add_host_link_args(group: argparse._ActionsContainer) -> None:
    """--host-gbps and --host-latency: the link that prices OFFLOAD and RELOAD (simulate's and plan's)."""
    group.add_argument(
        "--host-gbps",
        type=float_flag(MIN_BANDWIDTH_GBPS),
        metavar="GB/S",
        help="bandwidth between a rank and host memory, for --offload's copies (default unlimited)",
    )
    group.add_argument(
        "--host-latency",
        type=float_flag(0, MAX_TIME_MS),
        metavar="MS",
        help="fixed time of each OFFLOAD or RELOAD (default 0; with typed times, which carry no bytes, the copy's "
        "whole time)",
    )


def host_link_from_args(args: argparse.Namespace, link: LinkCost) -> LinkCost:
    """`link` with --host-gbps and --host-latency where given."""
    if args.host_gbps is None and args.host_latency is None:
        return link
    return LinkCost(
        latency_ms=link.latency_ms if args.host_latency is None else args.host_latency,
        bandwidth_gbps=link.bandwidth_gbps if args.host_gbps is None else args.host_gbps,
    )


def add_cost_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("costs (per rank, cut per chunk; see below)", COST_MEANING)
    group.add_argument("--f", type=ms_list, metavar="T", help="forward time (default 1)")
    group.add_argument("--b", type=ms_list, metavar="T", help="full backward time (default 2)")
    group.add_argument("--w", type=ms_list, metavar="T", help="weight-gradient part of --b (default half of it)")
    group.add_argument("--comm", type=ms_list, metavar="T", help="cross-rank transfer time (default 0)")
    group.add_argument("--cost", type=Path, metavar="FILE", help="pipesim cost file instead of --f/--b/--w/--comm")
    group.add_argument("--recompute", action="store_true", help="recompute activations in the backward")
    group.add_argument(
        "--overlap-factor",
        type=float_flag(above=0, maximum=1),
        metavar="X",
        help="an OVERLAP_F_B pair takes X x (F + B), 0 < X <= 1 (default 1: no overlap)",
    )
    add_host_link_args(group)
    group.add_argument(
        "--a2a",
        type=ms_list,
        metavar="T",
        help="an MoE stage's expert-parallel all-to-all: one dispatch (or combine) of a microbatch through the "
        "stage; each F and B runs two, hidden under the other part of an overlapped pair (one value, or one per "
        "rank as the times; default 0)",
    )
    group.add_argument(
        "--moe-layers",
        type=positive_int,
        metavar="L",
        help="MoE layers per stage: how finely an overlapped pair interleaves its all-to-alls (default 1)",
    )
    group.add_argument(
        "--attention-fraction",
        type=float_flag(0, 1),
        metavar="A",
        help="attention's share of a whole sequence's compute: a later sequence chunk costs more under causal "
        "attention (seq1f1b; default 0, or the cost file's)",
    )
    group.add_argument(
        "--data-parallel",
        type=positive_int,
        metavar="D",
        help="D replicas of the pipeline: each stage's gradients ring all-reduced across them in 25 MiB buckets "
        "after its last backward, as pipesim's executor does, or where the schedule states REDUCE_GRAD "
        "(pipesim.sim.data_parallel decides; default 1: none)",
    )
    group.add_argument(
        "--sharded",
        action="store_true",
        help="FSDP: parameters sharded across the replicas (torch's UNSHARD all-gathers, REDUCE_GRAD reduce-scatters)",
    )
    group.add_argument(
        "--dp-latency", type=float_flag(0, MAX_TIME_MS), metavar="MS", help="ring latency per step (default 0)"
    )
    group.add_argument(
        "--dp-bandwidth",
        type=float_flag(MIN_BANDWIDTH_GBPS),
        metavar="GB/S",
        help="ring bandwidth (default unlimited)",
    )
    group.add_argument(
        "--grad-bytes",
        type=bytes_list,
        metavar="BYTES",
        help="with --data-parallel: gradient bytes (one value, or one per rank or per stage, cut as the times); "
        "uniform times carry none, and no bytes reduce in no time",
    )


def add_knob_args(parser: argparse.ArgumentParser) -> None:
    """--seq-chunks, --seq-cut and --offload: the knobs of the families that take them (simulate, compare)."""
    group = parser.add_argument_group("schedule knobs")
    group.add_argument(
        "--seq-chunks",
        type=positive_int,
        metavar="S",
        help="sequence chunks per microbatch (seq1f1b; default 2)",
    )
    group.add_argument(
        "--seq-cut",
        choices=SEQ_CUTS,
        help="how a microbatch's sequence is cut into chunks: even tokens, or balanced compute under causal "
        "attention (seq1f1b; default even)",
    )
    group.add_argument(
        "--offload",
        choices=OFFLOAD_MODES,
        default="none",
        help="move saved activations to host memory after each forward and back before its backward, on the "
        "copy engine (full: every microbatch that waits; selective: only where the wait hides the copies; "
        "priced by --host-gbps/--host-latency; default none)",
    )


def knob_options(args: argparse.Namespace) -> dict[str, object]:
    """The builder options of `add_knob_args`' flags (None: not given, the family's default)."""
    return {"seq_chunks": args.seq_chunks, "seq_cut": args.seq_cut}


def add_sampling_args(parser: argparse.ArgumentParser) -> None:
    """--jitter, --samples, --seed: the step as the median of sampled steps with its 90% interval."""
    from pipesim.sim.jitter import DEFAULT_SAMPLES

    group = parser.add_argument_group(
        "intervals (pipesim.sim.jitter)",
        "With --jitter, every action's time is drawn (lognormal, mean the price) and each draw simulated: the "
        "step is the median of the draws, with their 5th and 95th percentiles (JSON: step_ms, step_ms_p05, "
        "step_ms_p95, step_ms_deterministic).",
    )
    group.add_argument(
        "--jitter",
        type=float_flag(minimum=0, maximum=10),
        metavar="CV",
        help="coefficient of variation of every action (0.2 = 20%%)",
    )
    group.add_argument("--samples", type=positive_int, default=DEFAULT_SAMPLES, metavar="N", help="draws (default 200)")
    group.add_argument(
        "--seed", type=int_flag(0, 2**32 - 1), default=0, metavar="S", help="seed of the draws (default 0)"
    )


def sampling_from_args(args: argparse.Namespace) -> tuple | None:
    """(spread, samples, seed) of the flags, checked; None without --jitter."""
    from pipesim.sim.jitter import DEFAULT_SAMPLES, check_samples
    from pipesim.sim.spread import Spread

    if args.jitter is None:
        if args.samples != DEFAULT_SAMPLES or args.seed != 0:
            raise UsageError("--samples and --seed sample the step: give --jitter CV too")
        return None
    if args.seed < 0:
        raise UsageError(f"--seed must be a whole number >= 0, got {args.seed}")
    try:
        spread = Spread.uniform(args.jitter)
        check_samples(args.samples)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return spread, args.samples, args.seed


def add_figure_args(parser: argparse.ArgumentParser, what: str) -> None:
    for fmt in FIGURE_FORMATS:
        parser.add_argument(f"--{fmt}", type=Path, metavar="OUT", help=f"write the {what} as {fmt.upper()}")


def cost_from_args(args: argparse.Namespace) -> CostModel:
    """The cost model the flags describe: a cost file, or uniform / per-stage times."""
    given = [flag for flag in ("f", "b", "w", "comm") if getattr(args, flag) is not None]
    if args.cost is not None:
        if given:
            raise UsageError(f"--cost cannot be combined with {', '.join('--' + f for f in given)}")
        cost = load_cost(args.cost)
    else:
        try:
            cost = cost_from_times(args.f or [1.0], args.b, args.w, args.comm or [0.0])
        except ValueError as error:
            raise UsageError(
                str(error).replace("forward_ms", "--f").replace("backward_ms", "--b").replace("weight_ms", "--w")
            ) from None
    cost = cost.with_recompute(True) if args.recompute else cost
    extras: dict = {}
    if args.overlap_factor is not None:
        extras["overlap_factor"] = args.overlap_factor
    if args.attention_fraction is not None:
        extras["attention_fraction"] = args.attention_fraction
    if args.host_gbps is not None or args.host_latency is not None:
        extras["host_link"] = host_link_from_args(args, cost.host_link)
    if args.data_parallel is not None or args.sharded or args.dp_bandwidth is not None or args.dp_latency is not None:
        # One data-parallel group: torch's stated collectives and the executor's bucketed all-reduce after each
        # stage's last backward are both priced from it (CostModel.collectives, pipesim.sim.data_parallel).
        group = cost.dp_group
        replicas = args.data_parallel or group.replicas
        check_sizes(num_replicas=replicas)  # before anything is priced or written
        latency = group.link.latency_ms if args.dp_latency is None else args.dp_latency
        bandwidth = group.link.bandwidth_gbps if args.dp_bandwidth is None else args.dp_bandwidth
        try:
            link = LinkCost(latency_ms=latency, bandwidth_gbps=bandwidth)
        except ValueError as error:
            raise UsageError(f"--dp-latency / --dp-bandwidth: {error}") from None
        extras["dp_group"] = dataclasses.replace(group, replicas=replicas, link=link, sharded=args.sharded)
    cost = dataclasses.replace(cost, **extras) if extras else cost
    if args.grad_bytes is not None and cost.dp_group.replicas == 1:
        raise UsageError("--grad-bytes are the gradients reduced across replicas: add --data-parallel D (D > 1)")
    cost = _with_stage_values(cost, "a2a", "a2a_ms", args.a2a)
    if args.moe_layers is not None:
        stages = tuple(dataclasses.replace(stage, moe_layers=args.moe_layers) for stage in cost.stages)
        cost = dataclasses.replace(cost, stages=stages)
    return _with_grad_bytes(cost, args.grad_bytes)


def _with_stage_values(cost: CostModel, flag: str, field: str, values: list[float] | None) -> CostModel:
    """One flag's values onto the cost model's stages: one value, or one per stage cost."""
    if values is None:
        return cost
    stages = cost.stages
    if len(values) > 1 and len(stages) == 1:
        stages = stages * len(values)
    if len(values) not in (1, len(stages)):
        raise UsageError(f"--{flag} has {len(values)} values for {len(stages)} stage costs: give 1 or {len(stages)}")
    values = values * len(stages) if len(values) == 1 else values
    new = tuple(dataclasses.replace(stage, **{field: v}) for stage, v in zip(stages, values, strict=True))
    return dataclasses.replace(cost, stages=new)


def _with_grad_bytes(cost: CostModel, values: list[float] | None) -> CostModel:
    """--grad-bytes onto the cost model's stages (their `param_bytes`, which the reduction moves)."""
    if values is None:
        return cost
    stages = cost.stages
    if len(values) > 1 and len(stages) == 1:  # a uniform model, per-stage gradients: one entry per stage
        stages = stages * len(values)
    if len(values) not in (1, len(stages)):
        raise UsageError(
            f"--grad-bytes has {len(values)} values for {len(stages)} stage costs: give 1 or {len(stages)}"
        )
    values = values * len(stages) if len(values) == 1 else values
    new = tuple(dataclasses.replace(stage, param_bytes=v) for stage, v in zip(stages, values, strict=True))
    return dataclasses.replace(cost, stages=new)


def check_outputs(args: argparse.Namespace, flags: tuple[str, ...]) -> None:
    """Refuse every output the flags name that cannot be written (a folder, a FIFO, a missing folder), and the same
    file named twice, before any work is done or any file written."""
    seen: dict[str, str] = {}
    for flag in (*flags, *FIGURE_FORMATS):
        path = getattr(args, flag, None)
        if path is None:
            continue
        check_output(path)
        key = STANDARD_OUTPUT if is_standard_output(path) else os.path.realpath(path)
        if key in seen:
            said = f"name the same file {path}"
            if key == STANDARD_OUTPUT:
                said = "both write to standard output (-): give one of them a file"
            raise UsageError(f"--{seen[key]} and --{flag.replace('_', '-')} {said}")
        seen[key] = flag.replace("_", "-")


def summary_stream(*outputs: object) -> TextIO:
    """Where a command's words go: standard error when one of its outputs is `-` (standard output carries the
    data, to be piped on), else standard output."""
    return sys.stderr if any(is_standard_output(path) for path in outputs) else sys.stdout


def written_lines(*outputs: object) -> list[str]:
    """The "wrote FILE" lines of the outputs written to files (standard output is no file)."""
    return [f"wrote {path}" for path in outputs if path is not None and not is_standard_output(path)]


def write_figures(fig_factory, args: argparse.Namespace) -> list[str]:
    """Write the requested figure files; images go through one kaleido session."""
    wanted = {fmt: getattr(args, fmt) for fmt in FIGURE_FORMATS if getattr(args, fmt) is not None}
    if not wanted:
        return []
    from pipesim.charts.export import export_figures  # plotly and its exporter only when a figure is asked for

    fig = fig_factory()
    html = {"html": wanted["html"]} if "html" in wanted else {}
    written = []
    for fmt, path in html.items():  # HTML first: it works even when images cannot
        write_file(export_figures([fig], [fmt])[0][fmt], path)
        written.append(str(path))
    images = [fmt for fmt in wanted if fmt != "html"]
    if images:
        # The browser's driver logs its own warnings ("Wait expired, Browser is being closed by watchdog.") through
        # logging's last-resort handler onto stderr; a failure is this command's one line, so they go nowhere.
        import logging  # only where an image is rendered

        for logger in (logging.getLogger("choreographer"), logging.getLogger("kaleido")):
            if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
                logger.addHandler(logging.NullHandler())
        rendered = export_figures([fig], images)[0]
        for fmt in images:
            write_file(rendered[fmt], wanted[fmt])
            written.append(str(wanted[fmt]))
    return written


def span_texts(timeline: Timeline, schedule: Schedule, texts: list[list[str]]) -> Iterable[str] | None:
    """Each span's action as text, read off the schedule's `texts` (its `text_rows`) where the spans hold the
    schedule's very actions in its rows' order, as a simulation's do (the engine's order, rank by rank; compared
    by identity, at C speed, with no list built): `timeline_text` then formats no action again."""
    columns = timeline.columns  # a simulation's: its actions read off the engine's column, no Span built
    actions = columns.actions if columns is not None else list(map(itemgetter(1), timeline.spans))
    if len(actions) != schedule.num_actions:
        return None
    follows = all(map(is_, actions, chain.from_iterable(schedule.actions)))
    return chain.from_iterable(texts) if follows else None
