"""A step time with its interval: every action's time drawn from its spread, every draw simulated at once.

The simulator prices each action at one figure, but a real step waits on the slowest of many noisy actions: the
median of the steps is longer than the step of the typical actions (measured: 2.5% for 1F1B at 2 ranks x 4
microbatches with a 20% CV, 8.7% for GPipe at 4 x 16, actions drawn around their medians). `step_interval` draws
`samples` steps, seeded:

* each action's time is its price x exp(N(-sigma^2 / 2, sigma)), sigma from the kind's CV
  (`pipesim.sim.spread.Spread`), so its mean stays the price: a profile prices each action at its in-situ mean
  (a step sums its actions, which are skewed to the right, so it pays their mean), and a draw centred on
  the price as its median would count that skew twice (about CV^2 / 2 per action);
* each kind's price is also drawn once per sample, x exp(N(-se^2 / 2, se)) from its relative standard error: the
  profile's own uncertainty moves every action of the kind together, around the same mean;
* and the machine's speed once per sample, from `Spread.machine_cv` (the profile's drift between its rounds,
  `pipesim.analysis.drift`): the run predicted lands at a speed of its own, every action of it alike;

and simulates every draw in one pass over the schedule (`sweep_samples`): each rank's order and every dependency
are fixed, so the engine's sweep runs once with a numpy row of `samples` times per action instead of a float.
Each draw's step time is `pipesim.sim.steps.step_time_ms` over `step_tails`, exactly as `simulate_step` ends a
step; with no spread every draw is the deterministic step, bit for bit. The point is the median of the draws (it
carries the jitter penalty), the interval their 5th and 95th percentiles.

That is one step's interval. A measurement reports the median of many steps (verify-plan: three launches of at
least 30 steps, `pipesim.sim.spread.Measurement`), and its median moves far less than one step: the actions' own
jitter averages over its steps, and the machine's term over its launches (`pipesim.sim.spread.machine_cv`), while
a price measured wrong moves every step alike. So for a measurement the draws come in two halves of one pass: one
with each action's own jitter only, which gives the median step's penalty over the deterministic one (rho) and the
steps' spread (c, the SD of their logs); one with the prices' and the machine's draws only. Each draw of the second
half, x rho x exp(N(0, MEDIAN_SE x c / sqrt(steps))) for the median's own sampling error, is a draw of the
measured median. With no spread every draw is still the deterministic step, bit for bit.

Ranks that share fewer cores than there are ranks (`sweep_shared`) run the engine once per draw instead: the
shared cores' interleaving is not one fixed order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipesim.cost.model import CostModel
from pipesim.ir import Schedule
from pipesim.semantics.dag import Dependencies, dependencies
from pipesim.sim.data_parallel import AFTER_BACKWARD, charged_schedule, last_gradients, reduction_charge
from pipesim.sim.simulate import deadlock_error, engine_inputs, run_engine
from pipesim.sim.spread import MEDIAN_SE, ONE_STEP, Measurement, Spread
from pipesim.sim.steps import step_tails, step_time_ms

if TYPE_CHECKING:  # numpy is imported where a draw is made: `simulate` without --jitter starts without it
    import numpy as np

DEFAULT_SAMPLES = 200
MAX_SAMPLES = 10_000
LOW, HIGH = 5.0, 95.0  # the interval's percentiles: a 90% interval


@dataclass(frozen=True)
class StepInterval:
    """A predicted step time: `step_ms` the median of the sampled steps (the jitter penalty included), `p05_ms` and
    `p95_ms` their 5th and 95th percentiles, `deterministic_ms` the step of the medians (`simulate_step`'s)."""

    step_ms: float
    p05_ms: float
    p95_ms: float
    deterministic_ms: float
    samples: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "step_ms": self.step_ms,
            "step_ms_p05": self.p05_ms,
            "step_ms_p95": self.p95_ms,
            "step_ms_deterministic": self.deterministic_ms,
            "samples": self.samples,
        }


def check_samples(samples: int) -> int:
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(f"--samples must be a whole number from 1 to {MAX_SAMPLES:,}, got {samples!r}")
    return samples


def sampled_steps(
    schedule: Schedule,
    cost: CostModel,
    spread: Spread | tuple[Spread, Spread],
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    own_count: int = 0,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, float]:
    """(`samples` step times drawn from `spread`, the deterministic step time). Raises as `simulate` does. Two
    spreads (`_factors`): draws 1..own_count from the first, the rest from the second."""
    import numpy as np

    check_samples(samples)
    cost.check_fits(schedule)
    charge = reduction_charge(schedule, cost)
    scheduled = charged_schedule(schedule, charge)
    deps = dependencies(scheduled)
    inputs = engine_inputs(scheduled, cost, deps)
    base = np.asarray(inputs.durations, dtype=float)
    factors = _factors(deps, spread, samples, rng if rng is not None else np.random.default_rng(seed), own_count)
    durations = base[:, None] * factors
    durations[:, 0] = base  # draw 0 is the deterministic step: the point of reference, bit for bit
    if cost.shared_cores is not None and cost.shared_cores < deps.num_ranks:
        ends = np.empty_like(durations)
        for s in range(samples):
            _, column, stuck = run_engine(deps, durations[:, s].tolist(), inputs.hops, inputs.gaps, cost.shared_cores)
            if stuck:
                raise deadlock_error(deps, stuck)
            ends[:, s] = column
    else:
        ends = sweep_samples(deps, durations, inputs.hops, inputs.gaps)
    finished = _rank_finish(deps, ends, [[cost.collective_ms(c.stage, c.kind) for c in row] for row in inputs.tails])
    last = last_gradients(deps.ranks, deps.actions, deps.num_ranks) if charge == AFTER_BACKWARD else None
    steps = np.empty(samples)
    for s in range(samples):
        rank_done = finished[:, s].tolist()
        column = ends[:, s].tolist() if last is not None else []
        tails, _ = step_tails(rank_done, column, last, cost, charge)
        steps[s] = step_time_ms(rank_done, tails)
    return steps, float(steps[0])


def step_interval(
    schedule: Schedule,
    cost: CostModel,
    spread: Spread,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    measurement: Measurement = ONE_STEP,
) -> StepInterval:
    """The median of the sampled steps and their 90% interval: of one step, or of `measurement`'s median step
    (see the module docstring)."""
    import numpy as np

    if measurement.is_one_step:
        steps, deterministic = sampled_steps(schedule, cost, spread, samples, seed)
    else:
        steps, deterministic = _median_draws(schedule, cost, spread, samples, seed, measurement.steps)
    low, mid, high = np.percentile(steps, [LOW, 50.0, HIGH])
    return StepInterval(float(mid), float(low), float(high), deterministic, samples)


def _median_draws(
    schedule: Schedule, cost: CostModel, spread: Spread, samples: int, seed: int, steps: int
) -> tuple[np.ndarray, float]:
    """Draws of a measured median over `steps` steps (the module docstring): one pass, its first half of draws with
    the actions' own jitter only, its second with the prices' and the machine's only."""
    import numpy as np

    own_count = (samples - 1) // 2
    rng = np.random.default_rng(seed)
    halves = (Spread(spread.cv), Spread({}, spread.price_se, spread.machine_cv))
    drawn, deterministic = sampled_steps(schedule, cost, halves, samples, own_count=own_count, rng=rng)
    own, shared = drawn[1 : own_count + 1], drawn[own_count + 1 :]
    if not len(shared):  # too few samples for the second half: the prices and the machine at their medians
        shared = drawn[:1]
    if own_count and deterministic > 0:
        penalty = float(np.median(own)) / deterministic
        logs = np.log(np.maximum(own, 1e-300) / deterministic)
        spread_of_steps = float(np.std(logs, ddof=1)) if own_count > 1 else 0.0
    else:
        penalty, spread_of_steps = 1.0, 0.0
    median_se = MEDIAN_SE * spread_of_steps / math.sqrt(steps)
    if not median_se:
        return shared * penalty, deterministic
    return shared * penalty * np.exp(median_se * rng.standard_normal(len(shared))), deterministic


def _factors(
    deps: Dependencies,
    spread: Spread | tuple[Spread, Spread],
    samples: int,
    rng: np.random.Generator,
    own_count: int = 0,
) -> np.ndarray:
    """(actions, samples) multipliers of each action's price: its own jitter times its kind's price draw times the
    machine's speed draw, each a lognormal of mean 1 (sigma from the CV: sqrt(log(1 + CV^2)), so the draw's CV is
    the CV). Two spreads: the first `own_count` draws after the first from the first, the rest from the second."""
    import numpy as np

    if isinstance(spread, tuple):
        first = _factors(deps, spread[0], own_count + 1, rng)
        second = _factors(deps, spread[1], samples - own_count - 1, rng)
        return np.hstack([first, second])
    kinds = [kind for _, kind, _ in deps.actions]
    names = sorted({*spread.cv, *spread.price_se}, key=lambda k: k.value)
    sigma = np.array([math.sqrt(math.log1p(spread.cv.get(k, 0.0) ** 2)) for k in kinds])
    copies = deps.num_ops - len(kinds)  # OFFLOADs and RELOADs: their copy engine's time is not drawn
    if copies:
        return np.vstack([_compute_factors(kinds, names, sigma, spread, samples, rng), np.ones((copies, samples))])
    return _compute_factors(kinds, names, sigma, spread, samples, rng)


def _compute_factors(
    kinds: list, names: list, sigma: np.ndarray, spread: Spread, samples: int, rng: np.random.Generator
) -> np.ndarray:
    """`_factors` of the compute actions."""
    import numpy as np

    per_action = np.exp(sigma[:, None] * rng.standard_normal((len(kinds), samples)) - (sigma**2 / 2)[:, None])
    if names:
        price_sigma = np.array([math.sqrt(math.log1p(spread.price_se.get(k, 0.0) ** 2)) for k in names])
        draws = np.exp(
            price_sigma[:, None] * rng.standard_normal((len(names), samples)) - (price_sigma**2 / 2)[:, None]
        )
        row_of = {k: i for i, k in enumerate(names)}
        rows = np.array([row_of.get(k, -1) for k in kinds])
        known = rows >= 0
        per_action[known] *= draws[rows[known]]
    if spread.machine_cv:
        machine_sigma = math.sqrt(math.log1p(spread.machine_cv**2))
        per_action *= np.exp(machine_sigma * rng.standard_normal(samples) - machine_sigma**2 / 2)[None, :]
    return per_action


def sweep_samples(deps: Dependencies, durations: np.ndarray, hops: list[float], gaps: list[float]) -> np.ndarray:
    """`pipesim.sim.simulate.sweep` with a row of draws per action: the same visiting order, the same arithmetic
    (clock + gap, producer's end + hop across ranks, the latest of them, + duration), elementwise. Returns every
    action's end, shape (actions, samples)."""
    import numpy as np

    joined, copies = deps.joined or {}, deps.copies
    n, samples = durations.shape
    offsets, dep_lists, ranks = deps.offsets, deps.deps, deps.ranks
    if copies is not None:  # a backward's RELOAD is on its own rank: no hop
        ranks = ranks + copies.ranks
    ends = np.empty((n, samples))
    done = [False] * n
    pointer = list(offsets[:-1])
    clock = [np.zeros(samples) for _ in range(deps.num_ranks)]
    copy_clock = [np.zeros(samples) for _ in range(deps.num_ranks)]  # each rank's copy engine, as `sweep`'s
    waiting: dict[int, list[int]] = {}
    ready = list(range(deps.num_ranks - 1, -1, -1))
    while ready:
        rank = ready.pop()
        i, stop, now = pointer[rank], offsets[rank + 1], clock[rank]
        while i < stop:
            start = now + gaps[i]
            blocked = -1
            members = (i, *joined.get(i, ()))
            group = set(members)
            for m in members:
                for d in dep_lists[m]:
                    if m != i and d in group:
                        continue
                    if not done[d]:
                        blocked = d
                        break
                    start = np.maximum(start, ends[d] + hops[m] if ranks[d] != rank else ends[d])
                if blocked >= 0:
                    break
            if blocked >= 0:
                waiting.setdefault(blocked, []).append(rank)
                break
            now = start + durations[i]
            ends[i] = now
            done[i] = True
            for c in (copies.issued[i] or ()) if copies is not None else ():  # `simulate._run_copies`, per draw
                ends[c] = np.maximum(np.maximum(copy_clock[rank], now), ends[copies.needs[c]]) + durations[c]
                copy_clock[rank] = ends[c]
                done[c] = True
            if i in waiting:
                ready.extend(waiting.pop(i))
            i += 1
        pointer[rank], clock[rank] = i, now
    if not all(done):
        stuck = [(r, pointer[r], next(d for d in dep_lists[pointer[r]] if not done[d])) for r in range(deps.num_ranks)
                 if pointer[r] < offsets[r + 1]]  # fmt: skip
        raise deadlock_error(deps, stuck)
    return ends


def _rank_finish(deps: Dependencies, ends: np.ndarray, after_last: list[list[float]]) -> np.ndarray:
    """Per rank and draw, when its last action ends, then the collectives stated after it, laid back to back (as
    `simulate` lays them, so `rank_ends` of its timeline gives the same)."""
    import numpy as np

    rows = []
    for rank in range(deps.num_ranks):
        lo, hi = deps.offsets[rank], deps.offsets[rank + 1]
        at = ends[hi - 1].copy() if hi > lo else np.zeros(ends.shape[1])
        for ms in after_last[rank] if after_last else ():
            at = at + ms
        rows.append(at)
    return np.array(rows)
