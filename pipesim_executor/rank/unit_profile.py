"""`python -m executor profile`'s ranks: profile a model unit by unit and write a unit profile (pipesim.cost.profile).

Usage (the launcher, pipesim_executor.host.unit_profile, starts it; never by hand):

    python -m torch.distributed.run --nproc-per-node P -m pipesim_executor.rank.unit_profile --run-dir D

Every one of the P processes (the ranks of the runs being planned, sharing this machine as they will) measures at
once, so each sees the contention of the others (taking turns when they outnumber the cores):

1. each unit's share of F, B, F with capture, I, W and recomputation's own F, B and I at every microbatch size asked
   for; then the stages of the cuts the planner will pick (balanced over those shares), timed whole, which a plan
   uses as they are and which fit the constants a cut stage pays at its start and its end
   (pipesim_executor.rank.unit_timing, pipesim_executor.rank.unit_fit);
2. each optimizer's step on several sets of parameters (fixed plus per-byte time);
3. the link between ranks 0 and 1: a ping-pong through the run's own transport with a tiny and a real boundary
   tensor (latency plus bandwidth, pipesim_executor.rank.profile.link_cost), as a run's profile measures it; its
   latency then raised by what a message's hop inside the in-situ steps took beyond that price (4.);
4. in situ, at every size: real training steps through the executor's runtime (pipesim_executor.rank.calibrate, state
   restored) of 1F1B and of ZB-H1 (I and W), plain and recomputing, on the P ranks: the dispatch gap before each
   action and each rank's tail after its last (less its optimizer step, which is priced per parameter byte), and
   per kind what an action took there against what the profile prices the same stage at (`in_situ_scale`:
   actions in a pipeline run with colder caches than in a loop, a backward long after its forward). The schedules
   take turns in rounds until each factor's 95% CI is within +-3% or --in-situ-steps were run (`in_situ`).

Rank 0 takes the median over the processes of every timing and writes D/cost.json (pipesim.io.cost_file, version
2). Bytes are measured once (they are the same on every rank). Progress: `step` events of phase "profile".
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pipesim.cost.description import balance_units, parameter_split
from pipesim.cost.model import StageCost
from pipesim.cost.profile import (
    action_costs,
)
from pipesim.io.cost_file import save_profile
from pipesim.io.formats import read_json
from pipesim.ir import Schedule
from pipesim.schedules import build_schedule, options_for
from pipesim.semantics.lower import comm_plan
from pipesim_executor.config import RunConfig
from pipesim_executor.processes import exit_when_launcher_gone
from pipesim_executor.progress import emit
from pipesim_executor.rank.calibrate import agreed_ci, calibration_records, calibration_summary
from pipesim_executor.rank.entry import rank_main
from pipesim_executor.rank.model import model_parts, param_count
from pipesim_executor.rank.profile import profile_links
from pipesim_executor.rank.runtime import PipelineRuntime, build_rank_model
from pipesim_executor.rank.setup import Rank, make_optimizer, optimizer_for, setup
from pipesim_executor.rank.teardown import finish
from pipesim_executor.rank.transport import env_int
from pipesim_executor.rank.unit_fit import (
    CALIBRATION_STEPS,
    IN_SITU_CI,
    MAX_IN_SITU_STEPS,
    assemble,
    coefficient_of_variation,
    in_situ_steps,
    round_se,
)
from pipesim_executor.rank.unit_timing import (
    KINDS,
    Marks,
    ModelParts,
    medians,
    optimizer_times,
    stage_times,
    unit_bytes,
    unit_shares,
)
from pipesim_executor.run_files import COST_FILE, PROFILE_REQUEST_FILE

MAX_CUT_STAGES = 4  # the constants are fitted from the model cut evenly into 2..this many stages
ROUNDS = 3  # the repetitions of each size are spread over this many rounds of every measurement
# Beyond this many microbatches a step's per-step costs (its first actions, its lead) are a few percent of its
# actions, and an in-situ step of 4,096 microbatches would take minutes: larger counts run this many.
MAX_IN_SITU_MICROBATCHES = 32


def read_request(run_dir: Path) -> dict[str, Any]:
    """The launcher's request: microbatch sizes, optimizers, repetitions (checked there; trusted here)."""
    request = read_json(run_dir / PROFILE_REQUEST_FILE)
    return {"sizes": list(request["microbatch_sizes"]), "optimizers": list(request["optimizers"]),
            "repeats": int(request["repeats"]),
            "in_situ_steps": int(request.get("in_situ_steps", MAX_IN_SITU_STEPS)),
            "global_batch": request.get("global_batch")}  # fmt: skip


def core_slots(device: torch.device) -> int | None:
    """How many ranks of this machine compute at full speed at once: CPU cores / threads per rank; on a GPU, None
    (a device per rank) unless the GPUs are fewer than the ranks."""
    if device.type != "cpu":
        gpus = torch.cuda.device_count()
        return gpus if 0 < gpus < env_int("LOCAL_WORLD_SIZE", 1) else None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, torch.get_num_threads()))


def planned_splits(shares: dict[str, list[float]], num_stages: list[int]) -> dict[tuple[bool, int], tuple[int, ...]]:
    """The split points the planner picks at this size, per (recomputation, number of stages): pipesim's balance of
    the units' times (`pipesim.cost.description.balance_units` over the very costs a plan computes from this
    profile's shares); the profile times their stages whole and runs its in-situ steps on them."""
    n = len(shares["forward_ms"])
    splits = {}
    for recompute in (False, True):
        units = [
            StageCost(**action_costs({k: max(0.0, v[u]) for k, v in shares.items()}, False, recompute))
            for u in range(n)
        ]
        for stages in num_stages:
            if 1 <= stages <= n:
                splits[(recompute, stages)] = tuple(balance_units(units, stages, recompute).split_points)
    return splits


def stages_of(splits: dict[tuple[bool, int], tuple[int, ...]], num_units: int) -> list[tuple[int, int]]:
    """Every stage (first unit, the unit past the last) of the splits, once each, whole model left out."""
    ranges = set()
    for points in splits.values():
        bounds = [0, *points, num_units]
        ranges.update(zip(bounds, bounds[1:], strict=False))
    ranges.discard((0, num_units))
    return sorted(ranges)


def in_situ_microbatches(global_batch: int | None, size: int) -> int | None:
    """How many microbatches an in-situ step at microbatch `size` runs: the plans' own count (`global_batch` /
    `size`: an action's in-situ time depends on the step's shape: a CNN's backward ran 10-24% above its
    price in steps of 4 microbatches and 4-12% in steps of 8), at most MAX_IN_SITU_MICROBATCHES; None (the
    profile run's own count, `ProfileConfig.run_config`) when no global batch was given or it is smaller than
    the size."""
    if global_batch is None or global_batch < size:
        return None
    return min(MAX_IN_SITU_MICROBATCHES, global_batch // size)


def variant(
    r: Rank, size: int, schedule_name: str, chunks: int, recompute: bool, points: tuple[int, ...],
    microbatches: int | None = None,
) -> Rank:  # fmt: skip
    """The rank with its stages rebuilt for `schedule_name` (`chunks` stages per rank) on the same ranks, with
    `microbatches` (default: the run's) of `size`, recomputing or not, cut at `points` (same transport and clock:
    `run` set the transport up with every link these schedules use)."""
    pipeline, training = r.config.pipeline, r.config.training
    count = microbatches or pipeline.num_microbatches
    options = options_for(schedule_name, num_virtual_stages=chunks)
    schedule = build_schedule(schedule_name, r.num_ranks, count, **options)
    config = replace(
        r.config,
        pipeline=replace(
            pipeline,
            schedule=schedule_name,
            num_microbatches=count,
            num_virtual_stages=options.get("num_virtual_stages"),
        ),  # fmt: skip
        model=replace(r.config.model, split_points=points or None),
        training=replace(training, batch_size=size * count, recompute=recompute),
    )
    model = build_rank_model(
        schedule, config.model, seed=training.seed, microbatch_size=size, rank=r.pipe_rank,
        device=r.choice.device, recompute=recompute, dtype=training.dtype,
    )  # fmt: skip
    runtime = PipelineRuntime(
        schedule, r.pipe_rank, model.runners, model.shapes, r.runtime.transport, r.clock,
        dtype=model.wire_dtype, stash_bytes=model.stash_bytes, lookahead=r.runtime.lookahead,
    )  # fmt: skip
    optimizer = make_optimizer(config, model.parameters())
    return replace(r, config=config, schedule=schedule, model=model, runtime=runtime, optimizer=optimizer)


class Progress:
    """`step` events of phase "profile" over the parts this rank measures."""

    def __init__(self, rank: int, parts: int) -> None:
        self.rank, self.parts, self.done = rank, parts, 0

    def advance(self, what: str) -> None:
        emit("step", rank=self.rank, step=self.done, steps=self.parts, phase="profile", what=what)
        self.done += 1


def measure(r: Rank, request: dict[str, Any]) -> dict[str, Any]:
    """This process's measurements (see the module docstring); collective where it must be."""
    config, device = r.config, r.choice.device
    sizes, repeats = request["sizes"], request["repeats"]
    layers, make_batch, loss = model_parts(config.model, config.training.seed)
    bf16 = config.training.dtype == "bf16"
    parts = ModelParts(
        [layer.to(device) for layer in layers], make_batch, loss, device, config.training.seed,
        r.schedule.num_microbatches, torch.bfloat16 if bf16 else None, torch.bfloat16 if bf16 else torch.float32,
    )  # fmt: skip
    marks = Marks(device)
    names = [type(layer).__name__ for layer in layers]
    n = len(parts.layers)
    progress = Progress(r.rank, 2 * len(sizes) + 2)
    slots = core_slots(device) or r.world_size
    cut_counts = sorted({2, 3, MAX_CUT_STAGES, r.num_ranks, 2 * r.num_ranks})
    splits: dict[int, dict[tuple[bool, int], tuple[int, ...]]] = {}
    mine: dict[str, Any] = {"shares": {}, "stages": {}, "spread": {}, "round_se": {}, "bytes": {}, "optimizers": {},
                            "calibration": {}}  # fmt: skip
    for size in sizes:
        # 1. each unit's shares, every process in its turn (at most `slots` at once), in rounds: a burst of other
        # work on the machine then falls on many measurements a little instead of on one of them whole
        shares: dict[str, list[list[float]]] = {kind: [] for kind in KINDS}
        for turn in range(-(-r.world_size // slots)):
            if r.rank // slots == turn:
                for _ in range(ROUNDS):
                    for kind, samples in unit_shares(parts, size, -(-repeats // ROUNDS), marks).items():
                        shares[kind] += samples
            dist.barrier(group=r.control)
        mine["shares"][size] = medians(shares)
        everyone: list[Any] = [None] * r.world_size
        dist.all_gather_object(everyone, mine["shares"][size], group=r.control)
        common = {k: [_median([e[k][u] for e in everyone]) for u in range(n)] for k in KINDS}
        # 2. the stages of the cuts the planner will pick, timed whole, the same way
        splits[size] = planned_splits(common, cut_counts)
        ranges = stages_of(splits[size], n)
        stages: list[dict[str, list[float]]] = [{kind: [] for kind in KINDS} for _ in ranges]
        for turn in range(-(-r.world_size // slots)):
            if r.rank // slots == turn:
                for _ in range(ROUNDS):
                    for index, (a, b) in enumerate(ranges):
                        for kind, samples in stage_times(parts, a, b, size, -(-repeats // ROUNDS), marks).items():
                            stages[index][kind] += samples
            dist.barrier(group=r.control)
        mine["stages"][size] = [
            (a, b, {k: statistics.median(v) for k, v in stages[i].items()}) for i, (a, b) in enumerate(ranges)
        ]
        # how much each stage's action varied over its repetitions: what a prediction's interval is drawn from
        mine["spread"][size] = {k: [coefficient_of_variation(times[k]) for times in stages] for k in KINDS}
        # and how far each stage's median moved from round to round: the drift the repetitions' spread misses
        mine["round_se"][size] = {k: [round_se(times[k], ROUNDS) for times in stages] for k in KINDS}
        if r.rank == 0:
            mine["bytes"][size] = unit_bytes(parts, size)
        progress.advance(f"units at microbatch size {size}")
    groups = [[p for p in layer.parameters() if p.requires_grad] for layer in parts.layers]
    halves = parameter_split([param_count(layer) for layer in parts.layers], min(2, n))
    bound = halves[0] if halves else n
    groups += [
        [p for g in groups[:bound] for p in g],
        [p for g in groups[bound:] for p in g],
        [p for g in groups for p in g],
    ]
    for name in request["optimizers"]:
        mine["optimizers"][name] = optimizer_times(
            lambda params, name=name: optimizer_for(name, params, config.training.lr), groups, repeats, marks
        )
    progress.advance("optimizers")
    del parts, layers
    mine["links"] = profile_links(r, repeats) if r.world_size > 1 else {}
    progress.advance("link")
    shared = slots < r.world_size
    for size in sizes:
        count = in_situ_microbatches(request["global_batch"], size)
        mine["calibration"].update(in_situ(r, size, splits[size], shared, request["in_situ_steps"], count))
        progress.advance(f"in-situ steps at microbatch size {size}")
    mine["names"] = names
    return mine


def in_situ(
    r: Rank,
    size: int,
    splits: dict[tuple[bool, int], tuple[int, ...]],
    shared: bool,
    max_steps: int,
    microbatches: int | None = None,
) -> dict[tuple, dict[str, Any]]:
    """The in-situ steps at one size: every in-situ schedule (`unit_fit.in_situ_steps`), plain and recomputing, in
    interleaved rounds of CALIBRATION_STEPS steps each (A B C .., A B C ..: a drift of the machine's speed hits
    every one alike), a schedule leaving the rounds once each of its stage and kind's medians is known to
    +-IN_SITU_CI on every rank (`agreed_ci`) or it ran `max_steps`. Each schedule is rebuilt for its
    round (its first step dropped again), so the rounds hold one model at a time. Per key (size, schedule, chunks,
    recompute, split), its summary (pipesim_executor.rank.calibrate)."""
    variants = [(name, chunks, recompute) for (name, chunks) in in_situ_steps() for recompute in (False, True)]
    records: dict[tuple, list[dict[str, Any]]] = {}
    built: dict[tuple, tuple[float, list[int], bool]] = {}
    open_ = list(variants)
    while open_:
        for name, chunks, recompute in list(open_):
            points = splits.get((recompute, r.num_ranks * chunks))
            try:
                if points is None:
                    raise ValueError("more stages than units")
                try:
                    sized = variant(r, size, name, chunks, recompute, points, microbatches)
                except ValueError:  # a count this schedule cannot build (too few microbatches): the default's
                    sized = variant(r, size, name, chunks, recompute, points)
            except ValueError:  # a schedule this many ranks or units cannot build: its class falls back
                open_.remove((name, chunks, recompute))
                continue
            kept = records.setdefault((name, chunks, recompute), [])
            kept += calibration_records(sized, CALIBRATION_STEPS)
            params = float(sum(p.numel() * p.element_size() for p in sized.model.parameters()))
            built[(name, chunks, recompute)] = (
                params,
                list(sized.model.split_points),
                sized.schedule.uses_split_backward,
                sized.schedule.num_microbatches,
            )
            del sized
            steps = len(kept) + len(kept) // (CALIBRATION_STEPS - 1)  # the dropped first step of each round counted
            if steps >= max_steps or agreed_ci(r, kept) <= IN_SITU_CI:
                open_.remove((name, chunks, recompute))
    out = {}
    for (name, chunks, recompute), kept in records.items():
        summary = calibration_summary(kept)
        if not shared:  # the spans serve only to turn shared-core durations into full-speed work
            summary.pop("spans", None)
        # each step's spans and receive waits on this machine's one clock: rank 0 reads the in-run hops off them
        # (pipesim.analysis.hops), what the link costs inside a step beyond its ping-pong
        summary["timing"] = [
            {
                "spans": record["spans"],
                "comm": [c for c in record["comm"] if c[0] == "recv"],
                "start": record["start"],
                "end": record["end"],
            }
            for record in kept
        ]
        params, points, split, count = built[(name, chunks, recompute)]
        summary.update(param_bytes=params, split_points=points, microbatches=count)
        out[(size, name, chunks, recompute, split)] = summary
    return out


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def linking_step(num_ranks: int, num_microbatches: int, fallback: str) -> tuple[str, Schedule]:
    """The in-situ step whose schedule uses the most links (an interleaved one: each neighbour both ways, and the
    last rank to the first): the rank sets its transport up on it, for every in-situ step to find its links. One
    rank has no links: the run's own schedule then."""
    built = []
    for name, chunks in in_situ_steps() if num_ranks > 1 else ():
        try:
            schedule = build_schedule(name, num_ranks, num_microbatches, **options_for(name, num_virtual_stages=chunks))
        except ValueError:  # sizes this family cannot build
            continue
        built.append((len(comm_plan(schedule).links), schedule.num_stages, name, schedule))
    if not built:
        return fallback, build_schedule(fallback, num_ranks, num_microbatches)
    *_, name, schedule = max(built, key=lambda entry: entry[:2])  # the first of the widest
    return name, schedule


def run(run_dir: Path) -> None:
    config = RunConfig.from_dict(read_json(run_dir / "config.json"))
    request = read_request(run_dir)
    pipeline = config.pipeline
    name, schedule = linking_step(pipeline.num_ranks, pipeline.num_microbatches, pipeline.schedule)
    options = options_for(name, num_virtual_stages=schedule.num_stages // schedule.num_ranks)
    config = replace(
        config, pipeline=replace(pipeline, schedule=name, num_virtual_stages=options.get("num_virtual_stages"))
    )
    exit_when_launcher_gone()  # the whole profile is "before training": a launcher gone ends the rank
    r = setup(config, schedule)
    emit("started", rank=r.rank, backend=r.choice.transport, device=str(r.choice.device))
    mine = measure(r, request)
    gathered: list[Any] | None = [None] * r.world_size if r.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0, group=r.control)
    if r.rank == 0:
        assert gathered is not None
        profile = assemble(config, request, gathered, r, core_slots(r.choice.device))
        save_profile(profile, run_dir / COST_FILE)
    dist.barrier(group=r.control)
    emit("done", rank=r.rank)


def main(argv: list[str] | None = None) -> int:
    return rank_main(
        run,
        "python -m pipesim_executor.rank.unit_profile",
        __doc__.splitlines()[0],
        "the profile's folder (config and request)",
        argv,
    )


if __name__ == "__main__":
    finish(main)
