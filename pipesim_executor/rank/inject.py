"""Stragglers for real: the sleep mode's stages, a slow rank's stretched actions, a slow link's late sends.

* Sleep mode (`--compute sleep`): each stage is a `SleepRunner` that sleeps its action's simulated cost instead of
  computing and hands on a small tensor (real processes, real gloo transfers), so 8 ranks run on 2 cores with
  durations the simulation knows (the runtime around the sleeps, the run measures and prices itself:
  pipesim_executor.rank.sleep_calibrate). Each action sleeps the duration pipesim's simulation gives it
  (`slept_ms`): an action alone its compute and the all-to-alls it waits for, a member of an overlapped pair its
  share of the pair's layout (pipesim.cost.overlap), which the runtime starts once every member's input is in.
* `--inject slow-rank=R:FACTOR`: every runner of rank R is a `StretchedRunner`: after each compute call it sleeps
  (FACTOR - 1) x that call's own measured duration, inside the action's span (the action takes FACTOR x as long).
  In sleep mode the runner's own sleep is FACTOR x its cost instead (`SleepRunner.stretch`): one sleep, one
  wake-up, as on the uniform ranks.
* `--inject link-delay=A-B:MS`: the transport of ranks A and B is a `DelayedTransport`: a send to the other one is
  handed to a thread that posts it MS later, while the sender goes on computing, as a slower link would carry it.
  Nothing synchronises per transfer (DESIGN.md rule 11): the handle is waited for where every send is.
* `--inject-steps alternate`: both are switched by a `StepSwitch` the training loop sets before each step (outside
  its timed region): uniform and injected steps alternate within one run, each injected step paired with the
  uniform step before it.

`precise_sleep` is the one sleep: time.sleep to within `SPIN_S` of the deadline, then a spin on perf_counter.
Measured here on 2 shared cores (load 1.6, docs/benchmarks.md): time.sleep overshoots by a median 70-75
us (p90 78-92 us) for 0.5-5 ms; the hybrid by a median 0.3-2 us (p90 under 4 us). Both see the scheduler's
millisecond stalls in their p99 when the cores are oversubscribed: that part is the machine, not the sleep.
"""

from __future__ import annotations

import queue
import threading
import time
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation
from pipesim.ir import Action, ActionKind, Schedule
from pipesim_executor.rank.offload import Held
from pipesim_executor.rank.runtime import RankModel

SPIN_S = 100e-6  # the last 100 us are spun, not slept
WIDTH = 16  # floats per sample of the sleep mode's messages


def precise_sleep(seconds: float) -> None:
    """Sleep `seconds`: time.sleep to within SPIN_S, then spin (see the module docstring for its precision)."""
    if seconds <= 0:
        return
    deadline = time.perf_counter() + seconds
    rest = seconds - SPIN_S
    if rest > 0:
        time.sleep(rest)
    while time.perf_counter() < deadline:
        pass


# --- sleep mode ---------------------------------------------------------------------------------------------

CALLS = {  # a runner's compute calls, by the kind of action each runs
    "forward": ActionKind.FORWARD,
    "backward": ActionKind.BACKWARD,
    "backward_input": ActionKind.BACKWARD_INPUT,
    "backward_weight": ActionKind.BACKWARD_WEIGHT,
}


class SleepRunner:
    """A stage that sleeps its action's cost (ms, per kind) and hands on zeros of the message's shape. One tiny
    parameter so the optimizer has something to step (it has no gradient: the step is microseconds). With
    `plan`, a kind's calls sleep its times in turn, one per action of that kind in the rank's order (the runtime
    runs every action of a step in that order), instead of the kind's one cost (`build_sleep_model` gives every
    action its simulated duration: a sequence chunk's share, a pair member's part included)."""

    def __init__(
        self,
        stage: int,
        is_first: bool,
        is_last: bool,
        costs_ms: dict[ActionKind, float],
        plan: dict[ActionKind, tuple[float, ...]] | None = None,
    ) -> None:
        self.stage, self.is_first, self.is_last = stage, is_first, is_last
        self.recompute = False
        self.costs_ms = costs_ms
        self._plan = {kind: times for kind, times in (plan or {}).items() if times}
        self._calls = dict.fromkeys(self._plan, 0)
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self._factors: dict[ActionKind, float] = {}
        self._switch: StepSwitch | None = None

    def stretch(self, factors: dict[str, float], switch: StepSwitch) -> None:
        """A slow rank in sleep mode: each call sleeps FACTOR x its cost in one sleep (while `switch` is on), the
        same stretch as `StretchedRunner`'s (which stretches the call, not the runtime's work around it) without
        its second sleep, whose wake-up on a loaded machine would slow the slowed rank by more than FACTOR."""
        self._factors = {CALLS[name]: factor for name, factor in factors.items()}
        self._switch = switch

    def parameters(self) -> list[torch.nn.Parameter]:
        return [self.weight]

    def remove_hooks(self) -> None:
        """Nothing to remove (the model runners' interface)."""

    def _sleep(self, kind: ActionKind) -> None:
        on = self._switch is not None and self._switch.on
        times = self._plan.get(kind)
        if times is None:
            ms = self.costs_ms[kind]
        else:  # the simulation's own duration of this action
            ms = times[self._calls[kind] % len(times)]
            self._calls[kind] += 1
        precise_sleep(ms * (self._factors.get(kind, 1.0) if on else 1.0) / 1e3)

    def forward(
        self, x: Tensor, target: Tensor | None = None, split: bool = False, chunk: Any = None
    ) -> tuple[Tensor, Any]:
        self._sleep(ActionKind.FORWARD)
        if self.is_last:
            return torch.zeros(()), x.shape
        return torch.zeros(x.shape), x.shape

    def backward(self, stash: Any, grad_output: Tensor | None) -> Tensor | None:
        self._sleep(ActionKind.BACKWARD)
        return None if self.is_first else torch.zeros(stash)

    def backward_input(self, stash: Any, grad_output: Tensor | None) -> tuple[Tensor | None, Any]:
        self._sleep(ActionKind.BACKWARD_INPUT)
        return (None if self.is_first else torch.zeros(stash)), stash

    def backward_weight(self, work: Any) -> None:
        self._sleep(ActionKind.BACKWARD_WEIGHT)


def slept_ms(schedule: Schedule, cost: CostModel, rank: int) -> dict[Action, float]:
    """What each of `rank`'s compute actions sleeps: its duration in pipesim's simulation of the same schedule and
    cost (`pipesim.sim.simulate.engine_inputs`, the one price: an overlapped pair's layout shared among its members,
    the all-to-alls an action alone waits for)."""
    from pipesim.semantics.dag import dependencies
    from pipesim.sim.simulate import engine_inputs

    deps = dependencies(schedule)
    durations = engine_inputs(schedule, cost, deps).durations
    lo, hi = deps.offsets[rank], deps.offsets[rank + 1]
    return dict(zip(deps.actions[lo:hi], durations[lo:hi], strict=True))


def build_sleep_model(schedule: Schedule, rank: int, cost: CostModel, microbatch_size: int) -> RankModel:
    """This rank's sleeping stages, priced by `cost` (cut for the schedule) as the simulation prices each action
    (`slept_ms`), and messages of microbatch_size x WIDTH floats; the batch maker gives zeros of the same width."""
    chain = schedule.pipeline_stages  # each direction of DualPipe has its own first and last stage
    plans: dict[int, dict[ActionKind, list[float]]] = {}
    for action, ms in slept_ms(schedule, cost, rank).items():  # in the rank's order
        plans.setdefault(action.stage, {}).setdefault(action.kind, []).append(ms)
    runners = {
        stage: SleepRunner(
            stage,
            stage % chain == 0,
            stage % chain == chain - 1,
            {k: cost.duration_ms(stage, k) for k in ActionKind},
            {kind: tuple(times) for kind, times in plans.get(stage, {}).items()},
        )
        for stage in schedule.stages_of_rank(rank)
    }
    shape = torch.Size((microbatch_size, WIDTH))
    shapes = [(shape, shape)] * schedule.num_stages

    def make_batch(batch_size: int, seed: int, step: int) -> tuple[Tensor, Tensor]:
        return torch.zeros(batch_size, WIDTH), torch.zeros(batch_size, WIDTH)

    copies = SleptCopies({s: cost.copy_ms(s) for s in runners})
    return RankModel(runners, shapes, {s: (0, 0, 0) for s in runners}, make_batch, copies=copies)


class SleptCopies:
    """Sleep mode's OFFLOADs and RELOADs (the copy engine's, pipesim_executor.rank.offload): each sleeps its priced
    copy time (`CostModel.copy_ms`: the stage's stash over the host link) on the copy engine's thread and moves
    nothing (a sleeping stage keeps no activations)."""

    def __init__(self, copy_ms: dict[int, float]) -> None:
        self.copy_ms = copy_ms

    @contextmanager
    def capture(self, skip: Any):
        yield {}

    def held(self, stage: int, storages: Any, stash: Any, skip: Any) -> Held:
        return Held([], nbytes=0)

    def offload(self, stage: int, held: Held) -> int:
        precise_sleep(self.copy_ms[stage] / 1e3)
        return 0

    def reload(self, stage: int, held: Held) -> int:
        precise_sleep(self.copy_ms[stage] / 1e3)
        return 0


# --- which steps carry the injection -----------------------------------------------------------------------------


class StepSwitch:
    """Whether the injection is on for the step in progress: always (`--inject-steps all`), or as the run's
    InjectConfig.injected_at says for each step (`alternate`); set by `set_step` between steps, read by the
    stretched runners and the delayed transport on every call."""

    def __init__(self, config: Any, warmup_steps: int) -> None:
        self._config, self._warmup = config, warmup_steps
        self.on = not config.alternates

    def set_step(self, step: int) -> bool:
        """Switch for global step `step` (warm-ups counted first); returns whether it carries the injection."""
        self.on = self._config.injected_at(step - self._warmup)
        return self.on


# --- a slow rank ----------------------------------------------------------------------------------------------


class StretchedRunner:
    """A stage runner whose compute calls are each followed by a sleep of (factor - 1) x their own duration, a
    factor per call (`factors`: forward, backward, backward_input, backward_weight). On a GPU the call is
    synchronised first to be measured (only this rank's, only with the injection). With a `switch`, only while
    it is on."""

    def __init__(
        self, runner: Any, factors: dict[str, float], device: torch.device, switch: StepSwitch | None = None
    ) -> None:
        self._runner, self._factors, self._switch = runner, factors, switch
        self._cuda = device.type == "cuda"

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._runner, name)
        factor = self._factors.get(name, 1.0)
        if factor == 1.0 or (self._switch is not None and not self._switch.on):
            return attribute

        def stretched(*args: Any, **kwargs: Any) -> Any:
            if self._cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = attribute(*args, **kwargs)
            if self._cuda:
                torch.cuda.synchronize()
            precise_sleep((factor - 1) * (time.perf_counter() - start))
            return out

        return stretched


def call_factors(perturbation: Perturbation, rank: int) -> dict[str, float]:
    """Per runner call, its stretch on `rank` (pipesim.cost.perturb's kind_factors): a full backward whose two parts
    differ takes their mean (the runner does not know its parts' split)."""
    scale = perturbation.kind_factors(rank)
    return {
        "forward": scale["F"],
        "backward": (scale["I"] + scale["W"]) / 2,
        "backward_input": scale["I"],
        "backward_weight": scale["W"],
    }


# --- a slow link ----------------------------------------------------------------------------------------------


class _LateSend:
    """A send a thread posts later: completed once posted and done; `wait` waits for both."""

    def __init__(self) -> None:
        self.posted = threading.Event()
        self.handle: Any = None
        self.error: BaseException | None = None

    def is_completed(self) -> bool:
        return self.posted.is_set() and (self.error is not None or self.handle.is_completed())

    def wait(self) -> None:
        self.posted.wait()
        if self.error is not None:
            raise self.error
        self.handle.wait()


class DelayedTransport:
    """The rank's transport, with each send to a peer in `delays_ms` posted that many ms after the call, by one
    thread in call order (each link is one process group only this thread then sends on). With a `switch`, only
    while it is on (a step's sends are all waited for within it, so none is in flight when it flips)."""

    def __init__(self, transport: Any, delays_ms: dict[int, float], switch: StepSwitch | None = None) -> None:
        self._transport, self._delays_s = transport, {peer: ms / 1e3 for peer, ms in delays_ms.items()}
        self._switch = switch
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._post_late, name="pipesim-link-delay", daemon=True).start()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def isend(self, tensor: Tensor, dst: int, tag: int) -> Any:
        if dst not in self._delays_s or (self._switch is not None and not self._switch.on):
            return self._transport.isend(tensor, dst, tag)
        late = _LateSend()
        self._queue.put((time.perf_counter() + self._delays_s[dst], tensor.detach(), dst, tag, late))
        return late

    def _post_late(self) -> None:
        while True:
            due, tensor, dst, tag, late = self._queue.get()
            precise_sleep(due - time.perf_counter())
            try:
                late.handle = self._transport.isend(tensor, dst, tag)
            except BaseException as error:  # the main thread raises it where it waits
                late.error = error
            late.posted.set()


def inject(r: Any) -> StepSwitch:
    """The run's injection on this rank (a `pipesim_executor.rank.setup.Rank`), after its profile phase so that the
    profile measures the devices as they are: its runners stretched if its pipeline rank is slow, its transport
    delayed towards its slow links' other ends; both behind the returned switch, which the training loop sets
    before each step (every rank the same way: the pattern is the config's)."""
    perturbation: Perturbation = r.config.inject.perturbation()
    switch = StepSwitch(r.config.inject, r.config.training.warmup_steps)
    rank, runtime = r.pipe_rank, r.runtime
    factors = call_factors(perturbation, rank)
    if any(f != 1.0 for f in factors.values()):
        for runner in runtime.runners.values():
            if isinstance(runner, SleepRunner):  # sleep mode: one longer sleep per action
                runner.stretch(factors, switch)
        runtime.runners = {
            s: runner if isinstance(runner, SleepRunner) else StretchedRunner(runner, factors, r.choice.device, switch)
            for s, runner in runtime.runners.items()
        }
    delays = {
        next(iter(pair - {rank})): ms for pair, ms in perturbation.link_extra_ms().items() if rank in pair and ms > 0
    }
    if delays:
        runtime.transport = DelayedTransport(runtime.transport, delays, switch)
    return switch
