"""Sleep mode's runtime, measured by the run itself, so that its prediction prices it.

A sleep-mode step is longer than its sleeps add up to: 2-4% on 2 shared cores, even quiet (docs/benchmarks.md).
Measured in a run's own timeline (1F1B, 4 ranks, F 10 / B 20 ms, load 0.3): each action's span is about
0.1 ms longer than its sleep (the runtime's work inside the span: the hand-over to the runner, the stash
bookkeeping, the wake-up from the sleep when the cores are busy), the runtime leaves about 0.15 ms before each
action that is not spent blocked in a receive (Python dispatch, posting receives, the timing marks), and a message's
hop, from its producer's end to its consumer's start, takes about 0.2 ms (a ping-pong of the sleep mode's tiny
tensor through gloo sees 0.05 ms: the rest is the waiting receiver's wake-up). Unpriced, these are what every sleep-mode
prediction fell short by. None of them is a constant of this machine or of the bench: the run measures them.

Each is priced by its median over the calibration steps. A step sums many of them along its critical path, and
they are skewed to the right (a wake-up is sometimes late, never early), so the sum of their medians falls short
of the step: on one run's own steps (load 0.3) by 1.3%, where their means fell 0.5% short. But six steps' means
follow whatever stalls those seconds held: at load 10 to 14, predictions priced by means erred +0.3% to +8.3%,
by medians -0.6% to -2.7% (docs/benchmarks.md), so medians it is.

Before the injection (a slow rank or link must not be in its own calibration) and before the measured steps,
every rank:

* times `precise_sleep` itself (`PROBES` sleeps of `PROBE_MS`): its overshoot, recorded, never priced (the spans
  already hold it);
* runs a few training steps through the runtime (`pipesim_executor.rank.calibrate`, as the profile phase does):
  each stage and kind's median span (the sleep plus the runtime's work inside the span), the dispatch gap before
  each action and the tail after the last one (optimizer, zeroing, last sends), and each boundary's hop (from the
  producer's end to the consumer's start, where the consumer already waited);
* ping-pongs the sleep mode's message with each neighbour (`pipesim_executor.rank.profile.profile_links`).

Rank 0 writes cost.json: the slept costs with each kind's measured excess added (the median of each span less what
that action slept, `pipesim_executor.rank.inject.slept_ms`: an action alone sleeps its all-to-alls too, a member of
an overlapped pair its share of the pair; never below the slept cost), the
measured gap and tail as the cost model's runtime, each link's measured one-way time added to the --comm latency;
the slept costs and everything measured are kept in its meta ("sleep_calibration"). The prediction
(pipesim_executor.host.predict) then simulates that model, the injection priced by pipesim.cost.perturb as before.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch.distributed as dist

from pipesim.analysis.hops import hop_samples
from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel, RankRuntime
from pipesim.cost.perturb import scaled
from pipesim.cost.stage import StageCost
from pipesim.io.cost_file import save_cost
from pipesim.ir import Action, ActionKind
from pipesim_executor.rank.calibrate import calibration_records, priced_tails, summarise
from pipesim_executor.rank.inject import precise_sleep, slept_ms
from pipesim_executor.rank.transport import env_int

PROBE_MS = 2.0  # the sleep's precision is probed at a bench-like duration, briefly
PROBES = 10
LINK_REPEATS = 7
STEPS = 7  # calibration steps, the first dropped (pipesim_executor.rank.calibrate): sleeps are cheap


def sleep_overshoot_us(probes: int = PROBES, ms: float = PROBE_MS) -> dict[str, float]:
    """Median and largest overshoot of `precise_sleep(ms)` over `probes` sleeps, in us (what the sleeps add)."""
    over = []
    for _ in range(probes):
        start = time.perf_counter()
        precise_sleep(ms / 1e3)
        over.append(((time.perf_counter() - start) * 1e3 - ms) * 1e3)
    return {"median_us": statistics.median(over), "max_us": max(over), "probe_ms": ms, "probes": probes}


def calibrate_sleep(r: Any, run_dir: Path) -> CostModel | None:
    """Measure this rank's runtime in sleep mode (collective); rank 0 writes cost.json and returns the model."""
    from pipesim_executor.rank.profile import profile_links

    sleep = sleep_overshoot_us()
    links = profile_links(r, LINK_REPEATS)
    records = calibration_records(r, STEPS)
    summary = summarise(records)  # medians (the module docstring says why not means)
    slept = slept_ms(r.schedule, r.config.compute.cost_model(r.schedule), r.pipe_rank)
    summary["excess_ms"] = span_excess(records, slept)
    # each step's spans and receives, for the in-run transfer times (one clock: every rank on this machine)
    timing = [{"spans": rec["spans"], "comm": rec["comm"]} for rec in records]
    one_clock = env_int("LOCAL_WORLD_SIZE", r.world_size) == r.world_size
    mine = {"sleep": sleep, "links": links, "calibration": summary, "timing": timing if one_clock else None}
    gathered: list[Any] | None = [None] * r.world_size if r.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0, group=r.control)
    cost = None
    if r.rank == 0:
        slept = r.config.compute.cost_model(r.schedule)
        cost = priced_sleep_cost(slept, gathered[: r.schedule.num_ranks], r.schedule.seq_chunks)
        save_cost(cost, run_dir / "cost.json")
    dist.barrier(group=r.control)
    return cost


def priced_sleep_cost(slept: CostModel, gathered: list[dict[str, Any]], seq_chunks: int = 1) -> CostModel:
    """The slept costs (one per stage, `ComputeConfig.cost_model`) with what each rank measured priced in: every
    stage and kind its median span's excess over its sleep, every rank its dispatch gap and tail, every boundary
    its one-way time. `gathered` holds one rank's measurements per pipeline rank, in rank order.

    With sequence chunks an action sleeps its chunk's share of the stage's time, 1/S of it on average, and pays the
    runtime's excess whole, which the simulation shares out among the chunks as it does the time: a chunk's excess
    over 1/S of the sleep, S times over on the microbatch's time (exact for equal shares)."""
    durations = {int(s): d for g in gathered for s, d in g["calibration"]["durations_ms"].items()}
    pinged = {int(b): m.get("large_ms") for g in gathered for b, m in g["links"].items()}
    in_run = transfer_times(gathered) if all(g.get("timing") is not None for g in gathered) else {}
    links = {b: in_run.get(b, ms) for b, ms in pinged.items()}
    # each action's excess over what it slept, measured where the run slept per action (`span_excess`), else its
    # span's over the kind's priced share
    measured = {int(s): e for g in gathered for s, e in g["calibration"].get("excess_ms", {}).items()}
    per_span = {"F": 1 / seq_chunks, "I": 1 / seq_chunks, "W": 1 / seq_chunks}
    excess = {
        s: {
            k: e * seq_chunks
            for k, e in (
                measured[s] if s in measured else stage_excess(scaled(slept.stages[s], per_span), durations.get(s, {}))
            ).items()
        }
        for s in range(len(slept.stages))
    }
    stages = tuple(with_excess(slept.stages[s], excess[s]) for s in range(len(slept.stages)))
    boundaries = max(len(slept.stages) - 1, 1)
    link_costs = tuple(with_link(slept.link(b), links.get(b)) for b in range(boundaries))
    meta = dict(slept.meta)
    meta["sleep_calibration"] = {
        "slept_ms": {str(s): {k.value: slept.duration_ms(s, k) for k in ActionKind} for s in range(len(stages))},
        "excess_ms": {str(s): excess[s] for s in sorted(excess)},
        "dispatch_ms": [g["calibration"]["dispatch_ms"] for g in gathered],
        "tail_ms": [g["calibration"]["tail_ms"] for g in gathered],
        "lead_ms": [g["calibration"].get("lead_ms", 0.0) for g in gathered],
        "links_ms": {str(b): links[b] for b in sorted(links)},
        "links_ping_pong_ms": {str(b): pinged[b] for b in sorted(pinged)},
        "links_source": "in-run transfers" if in_run else "ping-pong",
        "precise_sleep": [g["sleep"] for g in gathered],
        "steps": gathered[0]["calibration"]["steps"],
        "rule": "sleeps + measured span excess; measured dispatch gap, tail and lead; --comm + measured one-way time",
    }
    return replace(
        slept,
        stages=stages,
        links=link_costs,
        runtime=RankRuntime(
            step_overhead_ms=tuple(priced_tails([g["calibration"] for g in gathered])),
            dispatch_ms=tuple(g["calibration"]["dispatch_ms"] for g in gathered),
        ),
        provenance=replace(slept.provenance, meta=meta),
    )


def span_excess(records: list[dict[str, Any]], slept: dict[Action, float]) -> dict[str, dict[str, float]]:
    """Per stage and kind, the median of each calibration span less what its action slept (never below 0)."""
    over: dict[str, dict[str, list[float]]] = {}
    for record in records:
        for text, start, end in record["spans"]:
            action = Action.parse(text)
            over.setdefault(str(action.stage), {}).setdefault(action.kind.value, []).append(end - start - slept[action])
    return {s: {k: max(statistics.median(v), 0.0) for k, v in kinds.items()} for s, kinds in over.items()}


def stage_excess(stage: StageCost, measured: dict[str, float]) -> dict[str, float]:
    """Per kind measured on this stage, how much longer its median span was than its sleep (never below 0)."""
    slept = {"F": stage.forward_ms, "B": stage.backward_ms, "I": stage.i_ms, "W": stage.w_ms}
    return {kind: max(ms - slept[kind], 0.0) for kind, ms in measured.items() if kind in slept}


def with_excess(stage: StageCost, excess: dict[str, float]) -> StageCost:
    """The stage's costs with each kind's excess added: F to F; a full backward's to B (its W kept); a split
    backward's I and W to B and W each (B = I + W)."""
    forward = stage.forward_ms + excess.get("F", 0.0)
    if "I" in excess or "W" in excess:
        extra_i, extra_w = excess.get("I", 0.0), excess.get("W", 0.0)
        return replace(
            stage,
            forward_ms=forward,
            backward_ms=stage.backward_ms + extra_i + extra_w,
            weight_ms=stage.w_ms + extra_w,
        )
    return replace(stage, forward_ms=forward, backward_ms=stage.backward_ms + excess.get("B", 0.0))


def with_link(link: LinkCost, one_way: float | None) -> LinkCost:
    """The --comm charge plus the measured one-way time of the sleep mode's message (a boundary inside one rank,
    none measured, keeps its charge)."""
    if one_way is None:
        return link
    return replace(link, latency_ms=link.latency_ms + max(one_way, 0.0))


def transfer_times(gathered: list[dict[str, Any]]) -> dict[int, float]:
    """Per boundary, the median in-run hop of the calibration steps: from the producing action's end to the start
    of the action that consumes it, for receives already waiting when it ended (one posted later measures less).
    The simulation charges a rank's dispatch gap before it waits for inputs (pipesim.sim.simulate), so what follows
    a receive (the wake-up, the hand-over to the runner) is the hop's when the consumer waited (the one rule:
    `pipesim.analysis.hops.hop_samples`). Needs one clock
    (one machine); a boundary with no such receive is left out (the ping-pong prices it)."""
    samples = hop_samples([g["timing"] for g in gathered])
    return {b: statistics.median(v) for b, v in samples.items()}
