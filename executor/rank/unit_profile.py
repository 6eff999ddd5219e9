"""`python -m executor profile`'s ranks: profile a model unit by unit and write a unit profile (pipesim.cost.profile).

Usage (the launcher, executor.host.unit_profile, starts it; never by hand):

    python -m torch.distributed.run --nproc-per-node P -m executor.rank.unit_profile --run-dir D

Every one of the P processes (the ranks of the runs being planned, sharing this machine as they will) measures at
once, so each sees the contention of the others (taking turns when they outnumber the cores):

1. each unit's share of F, B, F with capture, I and W at every microbatch size asked for, and stages of several
   cuts timed whole, for the constants a stage pays per action (executor.rank.unit_timing);
2. each optimizer's step on several sets of parameters (fixed plus per-byte time);
3. the link between ranks 0 and 1: a ping-pong through the run's own transport with a tiny and a real boundary
   tensor (latency plus bandwidth, executor.rank.profile.link_cost), as a run's profile measures it;
4. in situ, at every size: real training steps of 1F1B on the P ranks through the executor's runtime
   (executor.rank.calibrate, state restored), for the dispatch gap before each action and each rank's tail after
   its last (less its optimizer step, which is priced per parameter byte), and to check the per-unit prediction of
   each stage against its in-situ time (the provenance keeps the ratio).

Rank 0 takes the median over the processes of every timing and writes D/cost.json (pipesim.io.cost_file, version
2). Bytes are measured once (they are the same on every rank). Progress: `step` events of phase "profile".
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from executor.config import RunConfig
from executor.processes import exit_when_launcher_gone
from executor.progress import emit
from executor.rank.calibrate import calibrate
from executor.rank.model import model_parts, param_count
from executor.rank.profile import link_cost, profile_links
from executor.rank.runtime import PipelineRuntime, build_rank_model
from executor.rank.setup import Rank, make_optimizer, optimizer_for, setup
from executor.rank.teardown import finish
from executor.rank.transport import env_int
from executor.rank.unit_timing import (
    KINDS,
    Marks,
    ModelParts,
    medians,
    optimizer_times,
    stage_times,
    unit_bytes,
    unit_shares,
)
from executor.run_files import COST_FILE, PROFILE_REQUEST_FILE
from pipesim.cost.balance import balance
from pipesim.cost.description import balance_units
from pipesim.cost.model import StageCost
from pipesim.cost.profile import (
    BYTE_KINDS,
    TIME_KINDS,
    ActionConstants,
    ProfiledUnit,
    SizeCurve,
    UnitProfile,
    action_costs,
)
from pipesim.cost.runtime import OptimizerTime
from pipesim.io.cost_file import save_profile
from pipesim.io.formats import read_json
from pipesim.schedules import build_schedule

CALIBRATION_STEPS = 8  # in-situ steps per size (the first is dropped)
MAX_CUT_STAGES = 4  # the constants are fitted from the model cut evenly into 2..this many stages
ROUNDS = 3  # the repetitions of each size are spread over this many rounds of every measurement


def read_request(run_dir: Path) -> dict[str, Any]:
    """The launcher's request: microbatch sizes, optimizers, repetitions (checked there; trusted here)."""
    request = read_json(run_dir / PROFILE_REQUEST_FILE)
    return {"sizes": list(request["microbatch_sizes"]), "optimizers": list(request["optimizers"]),
            "repeats": int(request["repeats"])}  # fmt: skip


def core_slots(device: torch.device) -> int | None:
    """How many ranks of this machine compute at full speed at once: CPU cores / threads per rank; on a GPU, None
    (a device per rank) unless the GPUs are fewer than the ranks."""
    if device.type != "cpu":
        gpus = torch.cuda.device_count()
        return gpus if 0 < gpus < env_int("LOCAL_WORLD_SIZE", 1) else None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, torch.get_num_threads()))


def planned_cuts(shares: dict[str, list[float]], num_stages: list[int]) -> list[tuple[int, int]]:
    """The stages of the cuts the planner picks at this size: pipesim's balance of the units' times (plain and
    recomputing, `pipesim.cost.description.balance_units` over the very costs a plan computes from this profile)
    into each of `num_stages` stages; the profile times them whole."""
    n = len(shares["forward_ms"])
    ranges = set()
    for recompute in (False, True):
        units = [
            StageCost(**action_costs({k: max(0.0, v[u]) for k, v in shares.items()}, False, recompute))
            for u in range(n)
        ]
        for stages in num_stages:
            if 2 <= stages <= n:
                bounds = [0, *balance_units(units, stages, recompute).split_points, n]
                ranges.update(zip(bounds, bounds[1:], strict=False))
    return sorted(ranges)


def at_size(r: Rank, size: int) -> Rank:
    """The rank with its stages rebuilt for microbatches of `size` (same schedule, transport, clock)."""
    config = replace(r.config, training=replace(r.config.training, batch_size=size * r.schedule.num_microbatches))
    model = build_rank_model(
        r.schedule, config.model, seed=config.training.seed, microbatch_size=size, rank=r.pipe_rank,
        device=r.choice.device, dtype=config.training.dtype,
    )  # fmt: skip
    runtime = PipelineRuntime(
        r.schedule, r.pipe_rank, model.runners, model.shapes, r.runtime.transport, r.clock,
        dtype=model.wire_dtype, stash_bytes=model.stash_bytes,
    )  # fmt: skip
    return replace(r, config=config, model=model, runtime=runtime, optimizer=make_optimizer(config, model.parameters()))


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
    mine: dict[str, Any] = {"shares": {}, "stages": {}, "bytes": {}, "optimizers": {}, "calibration": {}}
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
        ranges = planned_cuts(common, cut_counts)
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
        if r.rank == 0:
            mine["bytes"][size] = unit_bytes(parts, size)
        progress.advance(f"units at microbatch size {size}")
    groups = [[p for p in layer.parameters() if p.requires_grad] for layer in parts.layers]
    halves = balance([float(param_count(layer)) for layer in parts.layers], min(2, n)).split_points
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
    for size in sizes:
        sized = at_size(r, size)
        summary = calibrate(sized, CALIBRATION_STEPS)
        summary.pop("spans", None)
        summary["param_bytes"] = float(sum(p.numel() * p.element_size() for p in sized.model.parameters()))
        mine["calibration"][size] = summary
        del sized
        progress.advance(f"in-situ steps at microbatch size {size}")
    mine["names"] = names
    return mine


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def fit_optimizer(points: list[tuple[float, float]]) -> OptimizerTime:
    """Least squares of time against parameter bytes (fixed + per byte), both clamped at 0."""
    if len(points) == 1 or len({b for b, _ in points}) == 1:
        return OptimizerTime(0.0, max(0.0, _median([t for _, t in points]) / max(points[0][0], 1.0)))
    n = len(points)
    mean_b, mean_t = sum(b for b, _ in points) / n, sum(t for _, t in points) / n
    sxx = sum((b - mean_b) ** 2 for b, _ in points)
    slope = max(0.0, sum((b - mean_b) * (t - mean_t) for b, t in points) / sxx)
    return OptimizerTime(max(0.0, mean_t - slope * mean_b), slope)


def fit_cuts(rows: list[tuple[bool, bool, float]]) -> tuple[float, float, float]:
    """(at a cut start, at a cut end, RMS residual) of residual = start x [cut at the start] + end x [cut at the
    end], least squares over the measured stages (each a row: cut at its start, cut at its end, its time less its
    units' shares)."""
    ss = sum(1 for s, _, _ in rows if s)
    ee = sum(1 for _, e, _ in rows if e)
    se = sum(1 for s, e, _ in rows if s and e)
    sd = sum(d for s, _, d in rows if s)
    ed = sum(d for _, e, d in rows if e)
    det = ss * ee - se * se
    if det == 0:  # one kind of cut only: one constant for both
        both = _median([d / max(1, s + e) for s, e, d in rows if s or e])
        start, end = both, both
    else:
        start, end = (sd * ee - ed * se) / det, (ed * ss - sd * se) / det
    residuals = [d - start * s - end * e for s, e, d in rows]
    return start, end, (sum(r * r for r in residuals) / len(residuals)) ** 0.5 if residuals else 0.0


def assemble(config: RunConfig, request: dict[str, Any], everyone: list[dict[str, Any]], r: Rank) -> UnitProfile:
    """Rank 0: the medians over the processes, the fits, the in-situ terms and the provenance."""
    sizes = request["sizes"]
    first = everyone[0]
    n = len(first["shares"][sizes[0]]["forward_ms"])
    shares = {
        s: {k: [_median([e["shares"][s][k][u] for e in everyone]) for u in range(n)] for k in KINDS} for s in sizes
    }
    stage_ms = {
        s: [(a, b, {k: _median([e["stages"][s][i][2][k] for e in everyone]) for k in KINDS})
            for i, (a, b, _) in enumerate(first["stages"][s])]
        for s in sizes
    }  # fmt: skip
    start, end, spread = {}, {}, {}
    for kind in KINDS:
        rows = [
            ((a > 0), (b < n), times[kind] - sum(shares[s][kind][a:b])) for s in sizes for a, b, times in stage_ms[s]
        ]
        start[kind], end[kind], spread[kind] = fit_cuts(rows)
    action = ActionConstants(start, end)
    optimizers = {
        name: fit_optimizer([p for e in everyone for p in e["optimizers"][name]]) for name in request["optimizers"]
    }
    own = optimizers[config.training.optimizer]
    calibrations = [e["calibration"][s] for e in everyone[: r.num_ranks] for s in sizes]
    dispatch = _median([c["dispatch_ms"] for c in calibrations])
    tail = max(0.0, _median([c["tail_ms"] - own.step_ms(c["param_bytes"]) for c in calibrations]))
    links = {int(b): m for e in everyone for b, m in e["links"].items()}
    bytes_ = first["bytes"]
    units = []
    for u in range(n):
        curves = {k: SizeCurve(tuple(sizes), tuple(max(0.0, shares[s][k][u]) for s in sizes)) for k in TIME_KINDS}
        curves.update({k: SizeCurve(tuple(sizes), tuple(bytes_[s][u][k] for s in sizes)) for k in BYTE_KINDS})
        units.append(ProfiledUnit(first["names"][u], bytes_[sizes[0]][u]["param_bytes"], curves))
    profile = UnitProfile(
        units=tuple(units), microbatch_sizes=tuple(sizes), action=action, dispatch_ms=dispatch, tail_ms=tail,
        optimizers=optimizers, link=link_cost(links.get(0)), core_slots=core_slots(r.choice.device),
        model=asdict(config.model),
        stages={(s, a, b): times for s in sizes for a, b, times in stage_ms[s]},
    )  # fmt: skip
    provenance = {
        "source": "python -m executor profile",
        "model": config.model.spec or config.model.kind,
        "device": r.choice.device.type,
        "backend": r.choice.transport,
        "dtype": config.training.dtype,
        "processes": r.world_size,
        "threads_per_process": torch.get_num_threads(),
        "repeats": request["repeats"],
        "host": socket.gethostname(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "torch_version": torch.__version__,
        "load_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "links": "a ping-pong between ranks 0 and 1 through the run's own transport (tiny and real tensor)",
        "action_constants": {"rms_residual_ms": spread},
        "in_situ": in_situ_check(profile, everyone[: r.num_ranks], sizes, r),
        "process_spread": _process_spread(everyone, sizes, n),
    }
    return replace(profile, provenance=provenance)


def in_situ_check(profile: UnitProfile, replica: list[dict[str, Any]], sizes: list[int], r: Rank) -> dict[str, Any]:
    """Each calibration stage's in-situ F and B against what a plan from this profile prices it at (the planner's
    own cut, `PlanInputs.cut`): per stage and size the ratio, its median per kind, the dispatch gaps and tails."""
    from pipesim.plan.inputs import PlanInputs

    inputs = PlanInputs.from_profile(
        profile, devices=r.num_ranks, global_batch=1, optimizer=r.config.training.optimizer
    )
    points = tuple(r.model.split_points)  # the calibration steps' own split
    rows = []
    for size in sizes:
        cut = inputs.cut(inputs.units_for(size), points, microbatch_size=size, split=False, recompute=False)
        for stage, cost in enumerate(cut.stages):
            measured = replica[r.schedule.stage_to_rank[stage]]["calibration"][size]["durations_ms"].get(str(stage), {})
            for kind, predicted in (("F", cost.forward_ms), ("B", cost.backward_ms)):
                if kind in measured and predicted > 0:
                    rows.append({"size": size, "stage": stage, "kind": kind, "ratio": measured[kind] / predicted})
    return {
        "schedule": f"1f1b on {r.num_ranks} ranks x {r.schedule.num_microbatches} microbatches, split {list(points)}",
        "ratio_in_situ_over_profile": rows,
        "median_ratio": {k: _median([x["ratio"] for x in rows if x["kind"] == k]) for k in ("F", "B")},
        "dispatch_ms": [[e["calibration"][s]["dispatch_ms"] for s in sizes] for e in replica],
        "tail_ms": [[e["calibration"][s]["tail_ms"] for s in sizes] for e in replica],
    }


def _process_spread(everyone: list[dict[str, Any]], sizes: list[int], n: int) -> float | None:
    """How much the processes disagreed on the units' F and B shares: the median relative spread (max - min over
    the processes, over their mean) of the units that take at least a tenth of the mean unit's time."""
    if len(everyone) < 2:
        return None
    spreads = []
    for s in sizes:
        for kind in ("forward_ms", "backward_ms"):
            values = [[e["shares"][s][kind][u] for e in everyone] for u in range(n)]
            mean_unit = sum(statistics.mean(v) for v in values) / n
            spreads += [(max(v) - min(v)) / statistics.mean(v) for v in values if statistics.mean(v) > 0.1 * mean_unit]
    return _median(spreads) if spreads else None


def run(run_dir: Path) -> None:
    config = RunConfig.from_dict(read_json(run_dir / "config.json"))
    request = read_request(run_dir)
    pipeline = config.pipeline
    schedule = build_schedule(pipeline.schedule, pipeline.num_ranks, pipeline.num_microbatches)
    exit_when_launcher_gone()  # the whole profile is "before training": a launcher gone ends the rank
    r = setup(config, schedule)
    emit("started", rank=r.rank, backend=r.choice.transport, device=str(r.choice.device))
    mine = measure(r, request)
    gathered: list[Any] | None = [None] * r.world_size if r.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0, group=r.control)
    if r.rank == 0:
        assert gathered is not None
        profile = assemble(config, request, gathered, r)
        save_profile(profile, run_dir / COST_FILE)
    dist.barrier(group=r.control)
    emit("done", rank=r.rank)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m executor.rank.unit_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path, help="the profile's folder (config and request)")
    parser.add_argument("--launch-node", type=int, default=0, help="this node's rank (names the launch's processes)")
    args = parser.parse_args(argv)
    try:
        run(args.run_dir)
    except Exception as error:  # report, then fail this rank; torchrun ends the others
        emit("error", rank=env_int("RANK", 0), message=f"{type(error).__name__}: {error}")
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    finish(main)
