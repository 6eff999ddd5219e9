"""What the planner is given: the model's units and how their costs change with the microbatch size, the devices,
the batch, the memory cap, the optimizer, and what each rank spends outside its actions (`PlanInputs`).

Three sources of a model's units: a model description (FLOPs, re-costed exactly at every microbatch size), a
cost file's stages (a profile run's own cut; other sizes scale linearly), and a model profiled unit by unit
(`pipesim.cost.profile.UnitProfile`, `python -m executor profile`: measured size curves, the constants a stage
pays per action, the dispatch gap, the tail and each optimizer's step, the cores ranks share). Every candidate's
cost model is cut from them by `pipesim.plan.search.Evaluator.cost_model`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pipesim.cost.description import ModelDescription, stage_costs_from_units
from pipesim.cost.model import CostModel, DataParallelGroup, LinkCost, RankRuntime, StageCost
from pipesim.cost.perturb import Perturbation
from pipesim.cost.profile import UnitProfile
from pipesim.cost.runtime import RuntimeTerms
from pipesim.ir import Schedule
from pipesim.limits import require, require_items
from pipesim.plan.layout import Layout
from pipesim.programs import programs
from pipesim.sim.memory import check_optimizer

PROFILE_COMMAND = "pipesim-run profile"  # how a user adds sizes to a profile (the executor's console script)
TIE = 0.01  # step times closer than this (relative) are not told apart: the model's accuracy at best


@dataclass(frozen=True)
class PlanInputs:
    """The model (per-unit costs at a reference microbatch size), the devices, the cap, the batch, the optimizer,
    and what each rank spends outside its actions.

    `units` are the pieces stages are cut from (e.g. a model description's embedding, blocks and head), costed
    for one microbatch of `unit_microbatch_size` samples; other microbatch sizes scale time and bytes linearly
    unless `description` is given, which re-costs the model exactly for each size, or `profile` (a model profiled
    per unit, `python -m executor profile`), whose measured size curves give every size and whose action
    constants every stage pays. `runtime` prices each rank's time outside the actions for any cut (the dispatch
    gap, the step's tail, the optimizer's step on the rank's parameters, shared cores); without it each rank pays
    `step_overhead_ms` after its last action.
    """

    units: tuple[StageCost, ...]
    devices: int
    global_batch: int
    memory_cap_bytes: float | None = None
    optimizer: str = "adam"
    link: LinkCost = LinkCost()
    unit_microbatch_size: int = 1
    step_overhead_ms: float = 0.0
    description: ModelDescription | None = None
    profile: UnitProfile | None = None
    runtime: RuntimeTerms | None = None
    # The data-parallel ring a cost file describes (its dp_link and dp_bucket_bytes, as `simulate --cost` reads
    # them); None: the pipeline's link and the default bucket.
    dp_group: DataParallelGroup | None = None
    perturbation: Perturbation = Perturbation()  # stragglers among the devices (pipesim.cost.perturb), folded per depth
    # The link between a rank and host memory that prices an offloaded candidate's OFFLOADs and RELOADs
    # (`simulate --host-gbps`, a cost file's host_link); the default, free, is no price (pipesim.plan.offload).
    host_link: LinkCost = LinkCost()

    def __post_init__(self) -> None:
        require_items(self.units, "units", StageCost, "StageCost")
        require(self.link, "link", LinkCost, "a LinkCost")
        require(self.host_link, "host_link", LinkCost, "a LinkCost")
        require(self.memory_cap_bytes, "memory_cap_bytes", (int, float, type(None)), "a number of bytes or None")
        if not self.units:
            raise ValueError("the model needs at least one unit (layer) to split (units is empty)")
        if not sum(u.forward_ms + u.backward_ms for u in self.units) > 0:
            raise ValueError("the model's units take no time (all forward and backward times are 0): nothing to plan")
        if not isinstance(self.devices, int) or self.devices < 1:
            raise ValueError(f"devices must be a positive whole number, got {self.devices!r}")
        if not isinstance(self.global_batch, int) or self.global_batch < 1:
            raise ValueError(f"the global batch size must be a positive whole number, got {self.global_batch!r}")
        if self.memory_cap_bytes is not None and not self.memory_cap_bytes > 0:
            raise ValueError(f"the memory cap must be > 0 bytes, got {self.memory_cap_bytes!r}")
        check_optimizer(self.optimizer)
        if not isinstance(self.perturbation, Perturbation):
            raise ValueError(f"perturbation must be a Perturbation, got {self.perturbation!r}")
        self.perturbation.check_ranks(self.devices)

    @classmethod
    def from_description(cls, description: ModelDescription, **kwargs: Any) -> PlanInputs:
        link = LinkCost(description.link_latency_ms, description.link_bandwidth_gbps)
        return cls(
            units=tuple(description.unit_costs()),
            link=link,
            unit_microbatch_size=description.microbatch_size,
            description=description,
            **kwargs,
        )

    @classmethod
    def from_cost(cls, cost: CostModel, **kwargs: Any) -> PlanInputs:
        """A cost file's stages read as units (profile with one unit per stage to plan any split)."""
        overhead = cost.step_overhead_ms
        return cls(
            units=cost.stages,
            link=cost.links[0],
            unit_microbatch_size=int(cost.meta.get("microbatch_size", 1)),
            step_overhead_ms=max(overhead, default=0.0),
            dp_group=cost.dp_group,
            **{"host_link": cost.host_link, **kwargs},
        )

    def replica_group(self, replicas: int) -> DataParallelGroup:
        """The data-parallel group of a candidate's `replicas`: one source for the all-reduce's link and bucket
        (the cost file's where one is given, like `simulate --cost`; else the pipeline's link)."""
        if self.dp_group is None:
            return DataParallelGroup(replicas, self.link)
        return DataParallelGroup(replicas, self.dp_group.link, bucket_bytes=self.dp_group.bucket_bytes)

    @classmethod
    def from_profile(cls, profile: UnitProfile, **kwargs: Any) -> PlanInputs:
        """A model profiled per unit: its size curves, action constants and per-rank terms (the dispatch gap, the
        tail, the step of `optimizer`, which the profile must have timed, and the cores ranks share)."""
        optimizer = kwargs.get("optimizer", cls.optimizer)
        first = profile.microbatch_sizes[0]
        return cls(
            units=profile.unit_costs(first),
            link=profile.link,
            unit_microbatch_size=first,
            profile=profile,
            runtime=profile.runtime_terms(check_optimizer(optimizer)),
            **kwargs,
        )

    def extrapolates(self, size: int) -> bool:
        """Whether a microbatch of `size` lies outside the sizes the profile measured (between two of them is
        interpolated, not extrapolated); never for a model that did not come from a profile."""
        sizes = () if self.profile is None else self.profile.microbatch_sizes
        return bool(sizes) and not sizes[0] <= size <= sizes[-1]

    def check_sizes(self, sizes: tuple[int, ...], allowed: bool, program: str = PROFILE_COMMAND) -> None:
        """Refuse microbatch sizes outside the profiled ones unless `allowed` (`PlanSpace.extrapolate`), in one line
        that names the command measuring them (`program`: how the user runs the executor's profile)."""
        outside = [s for s in sizes if self.extrapolates(s)]
        if not outside or allowed or self.profile is None:
            return
        profiled = self.profile.microbatch_sizes
        wanted = ",".join(map(str, sorted({*profiled, *outside})))
        raise ValueError(
            f"microbatch size {','.join(map(str, outside))} lies outside the profiled sizes "
            f"{','.join(map(str, profiled))}: measure it with `{program} --microbatch-sizes {wanted}` (the model's "
            "flags as before), plan at the profiled sizes, or pass --extrapolate to predict it off the fit, marked "
            "extrapolated"
        )

    def calibration(self) -> dict[str, Any]:
        """What the step times rest on, for the CLI's summary, the plan JSON's "calibration" and the Plan page:
        `calibrated` (measured on the devices, or assumed), `source`, a `note` in words, and `uncertainty`: the
        relative difference below which two predictions are not told apart (the verification's tie rule)."""
        if self.profile is not None:
            from pipesim.analysis.profile_check import recorded_check

            spread = self.profile.provenance.get("process_spread")
            noise = spread / 2 if isinstance(spread, (int, float)) else 0.0
            device = self.profile.provenance.get("device", "the device")
            return {
                "calibrated": True,
                "source": "profile",
                "note": f"measured unit by unit on {device} ({programs().executor} profile): unit times, the "
                "dispatch gap, the step's tail and the optimizer's step",
                "uncertainty": max(TIE, noise),
                # how well the profile predicts its own in-situ steps (None: a profile made before the check)
                "check": recorded_check(self.profile.provenance),
            }
        if self.description is not None and self.runtime is not None:
            return {
                "calibrated": True,
                "source": "description calibrated from a run",
                "note": f"the description's device speed ({self.description.device_tflops:.4g} TFLOP/s) and "
                f"per-action overhead ({self.runtime.dispatch_ms:.3g} ms) fitted to a measured run",
                "uncertainty": TIE,
            }
        if self.description is not None:
            return {
                "calibrated": False,
                "source": "description",
                "note": "uncalibrated: the device's speed (--tflops) is assumed and no per-action overhead is "
                f"counted, so step times are estimates, not this machine's; profile the model ({programs().executor} "
                "profile) "
                "and plan with --cost, or pass --calibrate-from RUN_DIR",
                "uncertainty": TIE,
            }
        return {
            "calibrated": True,
            "source": "stage costs",
            "note": "a run's stage costs taken as units; other microbatch sizes scale linearly",
            "uncertainty": TIE,
        }

    def units_for(self, microbatch_size: int, split: bool = False, recompute: bool = False) -> tuple[StageCost, ...]:
        """The units' costs for one microbatch of `microbatch_size`; with a profile, `split` gives the costs of
        the schedules that run I and W (the forward recording leaf calls, B = I + W) and `recompute` those of a
        recomputing run (the forward without a graph, the backward that runs it again)."""
        if self.profile is not None:
            return self.profile.unit_costs(microbatch_size, split, recompute)
        if self.description is not None:
            return tuple(replace(self.description, microbatch_size=microbatch_size).unit_costs())
        factor = microbatch_size / self.unit_microbatch_size
        if factor == 1:
            return self.units
        return tuple(
            replace(
                u,
                forward_ms=u.forward_ms * factor,
                backward_ms=u.backward_ms * factor,
                weight_ms=None if u.weight_ms is None else u.weight_ms * factor,
                activation_bytes=u.activation_bytes * factor,
                weight_grad_bytes=None if u.weight_grad_bytes is None else u.weight_grad_bytes * factor,
                input_bytes=u.input_bytes * factor,
                output_bytes=u.output_bytes * factor,
            )
            for u in self.units
        )

    def units_key(self, microbatch_size: int, split: bool = False, recompute: bool = False) -> tuple:
        """What `units_for` reads of its arguments: only a profile prices the kinds of backward and recomputation
        apart, so a cache keyed by this shares the units of the rest."""
        return (microbatch_size, split, recompute) if self.profile is not None else (microbatch_size,)

    def cut(
        self,
        units: tuple[StageCost, ...],
        split_points: tuple[int, ...],
        *,
        microbatch_size: int,
        split: bool,
        recompute: bool,
        chunked: bool = False,
        w_share: float | None = None,
    ) -> CostModel:
        """The stages of a cut: the units summed; with a profile, each stage's times are the profile's for that
        stage (`UnitProfile.stage_costs`: timed whole where it was, else its units' shares plus what a cut stage
        pays at its start and its end, scaled to the in-situ steps)."""
        cost = stage_costs_from_units(list(units), split_points, recompute=recompute, link=self.link)
        if self.description is not None:  # a later sequence chunk's dearer attention, as the model's own cost has it
            cost = replace(cost, attention_fraction=self.description.attention_fraction())
        if self.profile is None:
            return cost
        bounds = [0, *split_points, len(units)]
        stages = []
        for stage, (start, stop) in zip(cost.stages, zip(bounds, bounds[1:], strict=False), strict=True):
            times = self.profile.stage_costs(microbatch_size, start, stop, split, recompute, chunked)
            if w_share is not None:
                times["weight_ms"] = times["backward_ms"] * w_share
            stages.append(replace(stage, **times))
        return replace(cost, stages=tuple(stages))

    def rank_runtime(self, schedule: Schedule | Layout, stages: tuple[StageCost, ...], replicas: int) -> RankRuntime:
        """Each rank's time outside its actions for this cut: with `runtime` (a profile's: of the schedule's class),
        its tail and the optimizer's step on the parameters it holds, the dispatch gap and the shared cores; else
        `step_overhead_ms` alone."""
        if self.runtime is None:
            return RankRuntime((self.step_overhead_ms,))
        params = [0.0] * schedule.num_ranks
        for stage, rank in enumerate(schedule.stage_to_rank):
            params[rank] += stages[stage].param_bytes
        terms = self.runtime
        if self.profile is not None:  # the in-situ terms of the schedule's class
            chunked = schedule.num_stages > schedule.num_ranks
            terms = self.profile.runtime_terms(self.optimizer, schedule.uses_split_backward, chunked)
        return terms.rank_runtime(params, replicas)
