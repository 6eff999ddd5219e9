"""Activation offload as a plan dimension: which candidates are also tried offloaded, and what an offloaded one costs.

An offloaded candidate is its family's schedule with OFFLOAD and RELOAD entries (`pipesim.sim.offload.with_offload`,
the one home of where they stand) under its own cost model with the plan's host link; its step is
`pipesim.sim.steps.simulate_step`'s and its memory the device peak of that timeline (`pipesim.sim.metrics`: the
copies take activations off the device and bring them back), with the most it holds in host memory beside it.
Its time depends on when the copies run, so no order walk or replay prices it: few candidates need it.

`OffloadPolicy.of` reads the space's choice: "auto" tries selective and full offload on a candidate that does not
fit the cap without it, and only where the host link is priced (a free link would make every capped plan offload
at no cost: give `--host-gbps`, or name a mode); "selective" or "full" tries that mode on every candidate; "none"
never offloads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel
from pipesim.ir import CommAction, CommKind, Schedule
from pipesim.plan.candidates import Candidate
from pipesim.plan.inputs import PlanInputs
from pipesim.semantics.lower import has_memory_moves
from pipesim.sim.memory import static_bytes
from pipesim.sim.metrics import compute_metrics
from pipesim.sim.offload import with_offload
from pipesim.sim.steps import simulate_step

AUTO_MODES = ("selective", "full")


@dataclass(frozen=True)
class OffloadPolicy:
    """The offload modes a plan tries and on which candidates: all of them, or (`over_cap_only`) those that do not
    fit the cap without offload."""

    modes: tuple[str, ...] = ()
    over_cap_only: bool = True

    @classmethod
    def of(cls, choice: str, inputs: PlanInputs) -> OffloadPolicy:
        """The policy of `PlanSpace.offload` (module docstring)."""
        if choice == "none":
            return cls()
        if choice != "auto":
            return cls((choice,), over_cap_only=False)
        if inputs.memory_cap_bytes is None or not host_link_priced(inputs.host_link):
            return cls()
        return cls(AUTO_MODES)

    def wants(self, c: Candidate) -> bool:
        """Whether a built candidate (kept on the device) is also tried offloaded."""
        return bool(self.modes) and c.offload == "none" and (not self.over_cap_only or not c.fits)


def host_link_priced(link: LinkCost) -> bool:
    """Whether a copy to host memory costs anything under `link` (the default link is free)."""
    return link != LinkCost()


def skipped_note(choice: str, inputs: PlanInputs, candidates: list[Candidate]) -> str | None:
    """One line where "auto" left offload out of a capped plan because the host link is free and some built
    candidate is over the cap (where offload could have changed the answer), else None."""
    over_cap = any(c.built and not c.fits for c in candidates)
    if choice == "auto" and over_cap and inputs.memory_cap_bytes is not None and not host_link_priced(inputs.host_link):
        return (
            "note: offload not tried: no host link priced (--host-gbps, --host-latency or the cost file's host_link); "
            "--offload selective|full tries it at that price"
        )
    return None


def variant(base: Candidate, mode: str) -> Candidate:
    """`base` offloaded with `mode`: the same shape, sizes and split, none of its numbers."""
    return replace(
        base,
        offload=mode,
        step_ms=None,
        throughput=None,
        peak_memory_bytes=None,
        fits=False,
        bubble_fraction=None,
        rank_memory=[],
        pruned=None,
        step_ms_p05=None,
        step_ms_p95=None,
        step_ms_deterministic=None,
        peak_host_bytes=None,
    )


def offloaded(schedule: Schedule, cost: CostModel, c: Candidate, host_link: LinkCost) -> tuple[Schedule, CostModel]:
    """The schedule and cost model an offloaded candidate stands for (`with_offload` under the host link)."""
    cost = replace(cost, host_link=host_link)
    return with_offload(schedule, c.offload, cost), cost


def copy_floor_ms(schedule: Schedule, cost: CostModel, c: Candidate, host_link: LinkCost) -> float:
    """A lower bound of a fully offloaded candidate's step before it is simulated: the busiest rank's copy engine
    (each OFFLOAD and RELOAD it runs, one after another). Every copy precedes a RELOAD, and every RELOAD the
    backward it serves, so all of them end within the step. 0 for selective offload, whose copies are known only
    once its base is simulated."""
    if c.offload != "full":
        return 0.0
    moved, cost = offloaded(schedule, cost, c, host_link)
    copies = (CommKind.OFFLOAD, CommKind.RELOAD)
    return max(
        sum(cost.copy_ms(e.stage) for e in row if isinstance(e, CommAction) and e.kind in copies)
        for row in moved.order_rows()
    )


def price_offloaded(c: Candidate, schedule: Schedule, cost: CostModel, inputs: PlanInputs) -> bool:
    """Set an offloaded candidate's step, throughput, bubble, device memory per rank and host peak from one
    simulated step of its offloaded schedule (`c.error` set where it cannot be built). False where the mode moves
    nothing (selective offload finding no wait worth a copy): the candidate is its base again, not a new one."""
    try:
        moved, cost = offloaded(schedule, cost, c, inputs.host_link)
        if not has_memory_moves(moved):
            return False
        step = simulate_step(moved, cost)
    except ValueError as error:
        c.error = str(error)
        return True
    metrics = compute_metrics(step.timeline, cost)
    statics = static_bytes(moved, cost, inputs.optimizer)
    c.rank_memory = [sum(s) + r.peak_activation_bytes for s, r in zip(statics, metrics.ranks, strict=True)]
    c.peak_memory_bytes = max(c.rank_memory)
    c.peak_host_bytes = max(r.peak_host_bytes for r in metrics.ranks)
    cap = inputs.memory_cap_bytes
    c.fits = cap is None or c.peak_memory_bytes <= cap
    c.step_ms = step.step_ms
    c.throughput = inputs.global_batch / c.step_ms * 1e3
    c.bubble_fraction = metrics.bubble_fraction
    return True
