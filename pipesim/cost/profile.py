"""A model profiled unit by unit (`python -m executor profile`): what the planner prices any split, microbatch size
and optimizer of it with.

Units are the pieces stages are cut from (a Transformer's embedding, each block and its head; a custom model's
layers), so a plan's split points pass unchanged to `executor run --split-points`. Per unit and profiled microbatch
size, the profile holds:

* F, B, F with the leaf calls recorded for a split backward, I and W: each unit's share of a stage's action,
  timed inside one stage holding every unit (boundary stamps), so that a unit is timed in the company it keeps
  in a run, not alone in a loop where its weights never leave the cache. The last unit carries the loss;
* the bytes F stashes (all, and the part only W needs), the bytes entering and leaving it, its parameter bytes.

Then what a stage and a rank pay beyond the units (`ActionConstants`, `RuntimeTerms`): per action kind what a stage
cut out of the model pays at each cut (a stage starting after unit 0 pays an entry into the runner's call, one
ending before the last unit an exit: the shares of the whole model's call hold its entry in the first unit and its
exit in the last), fitted from stages of several cuts; per rank the dispatch gap
before each action and the step's tail after the last (with its lead before the first), measured in real steps of
the executor's runtime (in situ), and each optimizer's step as fixed plus per-parameter-byte time.
`pipesim.cost.runtime.RuntimeTerms` turns them into a candidate's `RankRuntime`, which `pipesim.sim.steps` ends
every step with.

Other microbatch sizes: `SizeCurve.at` reads a time off its non-decreasing fit, at a profiled size and on the line
through the two nearest elsewhere (never cheaper at a larger size); the affine fit a + b x size and its
residual are reported with it, to say how far from a straight line a unit's time is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from pipesim.cost.links import LinkCost
from pipesim.cost.runtime import OptimizerTime, RuntimeTerms, check_finite_non_negative
from pipesim.cost.size_curve import SizeCurve, non_decreasing  # noqa: F401 - re-exported: the profile's curves
from pipesim.cost.stage import StageCost

# F, B, F recording leaf calls (split backward), I, W; and under recomputation F without a graph, B and I with
# the forward they run again first.
TIME_KINDS = (
    "forward_ms",
    "backward_ms",
    "forward_split_ms",
    "input_ms",
    "weight_ms",
    "forward_recompute_ms",
    "backward_recompute_ms",
    "input_recompute_ms",
)
BYTE_KINDS = ("activation_bytes", "weight_grad_bytes", "input_bytes", "output_bytes")
# measured by newer profiles (older ones lack it: 0): the part of a unit's activation that is its own output
OPTIONAL_BYTE_KINDS = ("output_stash_bytes",)


@dataclass(frozen=True)
class ProfiledUnit:
    """One unit's measurements: `curves` maps each of TIME_KINDS and BYTE_KINDS to its SizeCurve."""

    name: str
    param_bytes: float
    curves: Mapping[str, SizeCurve]

    def __post_init__(self) -> None:
        missing = [k for k in (*TIME_KINDS, *BYTE_KINDS) if k not in self.curves]
        if missing:
            raise ValueError(f"unit {self.name!r}: no measurement of {', '.join(missing)}")
        check_finite_non_negative(f"unit {self.name!r}: param_bytes", self.param_bytes)

    def cost_at(self, size: int, split: bool, recompute: bool = False) -> StageCost:
        """This unit's costs for one microbatch of `size`: with `split` (schedules that run I and W) the forward
        that records leaf calls and B = I + W; otherwise the plain F and B, W its share measured by the split.
        With `recompute` the forward is the one without a graph, and B (or I) is what remains of the measured
        backward once that forward is taken out: the cost model adds F back to every B and I under
        recomputation (`CostModel.duration_ms`), which gives the measured recomputing backward."""
        at = {kind: curve.at(size) for kind, curve in self.curves.items()}
        activation = at["activation_bytes"]
        return StageCost(
            **action_costs(at, split, recompute),
            activation_bytes=activation,
            weight_grad_bytes=min(at["weight_grad_bytes"], activation),
            output_stash_bytes=min(at.get("output_stash_bytes", 0.0), activation),
            input_bytes=at["input_bytes"],
            output_bytes=at["output_bytes"],
            param_bytes=self.param_bytes,
        )


def action_costs(at: Mapping[str, float], split: bool, recompute: bool) -> dict[str, float]:
    """`action_times` clamped as a StageCost needs them (never below 0, W within B): a unit's or a stage's
    forward_ms, backward_ms and weight_ms, the one conversion the planner and the profile's cuts use."""
    return _clamped(action_times(at, split, recompute))


def action_times(at: Mapping[str, float], split: bool, recompute: bool) -> dict[str, float]:
    """The measured kinds (TIME_KINDS) of a unit or a stage as the cost model's forward_ms, backward_ms and
    weight_ms for a plain, split (I and W: B = I + W) or recomputing candidate (B and I less the forward the cost
    model adds back under recomputation). A plain candidate's W is its share of B measured by the split."""

    def get(name: str) -> float:
        return float(at.get(name, 0.0))

    i_ms, w_ms = get("input_ms"), get("weight_ms")
    forward = get("forward_recompute_ms") if recompute else get("forward_split_ms" if split else "forward_ms")
    if split:
        i_ms = get("input_recompute_ms") - forward if recompute else i_ms
        return {"forward_ms": forward, "backward_ms": i_ms + w_ms, "weight_ms": w_ms}
    backward = get("backward_recompute_ms") - forward if recompute else get("backward_ms")
    share = w_ms / (i_ms + w_ms) if i_ms + w_ms > 0 else 0.5
    return {"forward_ms": forward, "backward_ms": backward, "weight_ms": backward * share}


def _clamped(times: dict[str, float]) -> dict[str, float]:
    """A unit's or a stage's times, never below 0 and W within B (StageCost's rule)."""
    backward = max(0.0, times["backward_ms"])
    return {
        "forward_ms": max(0.0, times["forward_ms"]),
        "backward_ms": backward,
        "weight_ms": min(backward, max(0.0, times["weight_ms"])),
    }


@dataclass(frozen=True)
class ActionConstants:
    """What a stage cut out of the model pays per action beyond its units' shares, per kind (ms): `start` when it
    starts after unit 0 (its first unit's share was measured without the call's entry, which unit 0 carries),
    `end` when it ends before the last unit (its last unit's share without the call's exit and the loss, which the
    last unit carries). Fitted by the profile from stages of several cuts (least squares); a missing kind is 0."""

    start: Mapping[str, float] = field(default_factory=dict)
    end: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for side in (self.start, self.end):
            for name, value in side.items():
                if name not in TIME_KINDS:
                    raise ValueError(f"unknown action constant {name!r}; valid: {', '.join(TIME_KINDS)}")
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"action constant {name} must be a finite number, got {value!r}")


# Kinds of schedule whose runs differ in what the profile's loops cannot see (which actions run, how many chunks
# share a rank's caches): a plain or a split backward, one stage per rank or several.
IN_SITU_CLASSES = ("plain", "split", "plain-chunked", "split-chunked")


def schedule_class(split: bool, chunked: bool) -> str:
    """The in-situ class of a schedule: its backward (plain B, or I and W) and whether a rank holds several stages."""
    return ("split" if split else "plain") + ("-chunked" if chunked else "")


@dataclass(frozen=True)
class InSituTerms:
    """What real steps of one class of schedule took through the executor's runtime (the profile's in-situ steps):
    the dispatch gap before each action, the step's tail after the last action less the optimizer's step (with the
    step's lead before its first action; older files priced none), and per
    kind the ratio of an action's in-situ mean time (what a step pays) to what the profile prices its stage at, at
    each profiled size (`scale`; 1 where not measured): in a pipeline an action runs with colder caches than in a
    loop (a backward long after its forward, two chunks' weights taking turns in a rank's cache, inputs just
    received). `ci`: per kind, each factor's 95% CI as a relative half-width (empty in older files). Both
    are ratio curves. `stages`: the same ratio for each stage the in-situ steps ran, (microbatch size, first unit,
    the unit past the last) -> kind -> factor: a stage of that very cut takes its own (an embedding's gather runs
    far colder in a pipeline than a LM head's matmul, so one factor per kind, the median over the stages, priced
    the first stage of a model whose ends dominate 20-45% low and the last 3-28% high); any other stage
    the class's `scale`. Empty in older files. Much of what the factors once corrected was the C allocator's
    history in the profile's processes (pipesim_executor.allocator, which the ranks now pin): the
    embedding-heavy model's read 1.2-2.0 before and 1.00 after."""

    dispatch_ms: float = 0.0
    tail_ms: float = 0.0
    scale: Mapping[str, SizeCurve] = field(default_factory=dict)
    ci: Mapping[str, SizeCurve] = field(default_factory=dict)
    stages: Mapping[tuple[int, int, int], Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_finite_non_negative("dispatch_ms", self.dispatch_ms)
        check_finite_non_negative("tail_ms", self.tail_ms)
        for label, table in (("scale", self.scale), ("ci", self.ci)):
            for name, curve in table.items():
                if name not in TIME_KINDS or not isinstance(curve, SizeCurve):
                    raise ValueError(f"in-situ {label} of {name!r}: a SizeCurve of one of {', '.join(TIME_KINDS)}")
            object.__setattr__(self, label, {k: replace(c, monotone=False) for k, c in table.items()})
        for key, factors in self.stages.items():
            if len(key) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in key):
                raise ValueError(f"an in-situ stage is (microbatch size, first unit, unit past the last), got {key!r}")
            for name, value in factors.items():
                if name not in TIME_KINDS:
                    raise ValueError(f"in-situ stage {key}: unknown kind {name!r}; valid: {', '.join(TIME_KINDS)}")
                check_finite_non_negative(f"in-situ stage {key}'s factor of {name}", value)

    def factor(self, kind: str, size: int, start: int | None = None, stop: int | None = None) -> float:
        """The in-situ factor of `kind` at `size`: the stage's own where the in-situ steps ran units start..stop-1
        at this size, else the class's (between profiled sizes on the line through the nearest two)."""
        own = self.stages.get((size, start, stop)) if start is not None and stop is not None else None
        if own is not None and kind in own:
            return own[kind]
        curve = self.scale.get(kind)
        return 1.0 if curve is None else curve.at(size)


@dataclass(frozen=True)
class UnitProfile:
    """A model profiled per unit on one kind of device (see the module docstring).

    `optimizers` maps each optimizer the profile timed (sgd, sgd-momentum, adam) to its step time; `core_slots` is
    how many ranks of one machine compute at full speed at once (CPU: cores / threads per rank; None: one device
    per rank). `model` is the executor's description of the model (kind, spec, sizes), which a verification
    rebuilds it from; `provenance` says where and how it was measured; `fits` the affine fit of every curve.
    """

    units: tuple[ProfiledUnit, ...]
    microbatch_sizes: tuple[int, ...]
    action: ActionConstants = ActionConstants()
    dispatch_ms: float = 0.0
    tail_ms: float = 0.0
    optimizers: Mapping[str, OptimizerTime] = field(default_factory=dict)
    link: LinkCost = LinkCost()
    core_slots: int | None = None
    model: Mapping = field(default_factory=dict)
    provenance: Mapping = field(default_factory=dict)
    stages: Mapping[tuple[int, int, int], Mapping[str, float]] = field(default_factory=dict)
    """Stages the profile timed whole (the balanced cuts the planner picks): (microbatch size, first unit, the unit
    past the last) -> every kind's median (TIME_KINDS)."""
    in_situ: Mapping[str, InSituTerms] = field(default_factory=dict)
    """Per class of schedule (IN_SITU_CLASSES), its in-situ terms; a class not measured takes its unchunked
    sibling's, then `dispatch_ms` and `tail_ms` with no scaling."""
    spread: Mapping[str, SizeCurve] = field(default_factory=dict)
    """Per time kind (TIME_KINDS), the coefficient of variation of the stages timed whole over their repetitions at
    each profiled size (a ratio curve); empty in a profile written before it kept its spread."""
    spread_repeats: int = 0
    """How many repetitions each measured median rests on (what the median's standard error shrinks with)."""
    spread_round_se: Mapping[str, SizeCurve] = field(default_factory=dict)
    """Per time kind, the relative standard error of a stage's price from its rounds (the standard deviation of the
    profile's round medians over their mean / sqrt(rounds), the median over the stages timed whole) at each
    profiled size: the machine's drift between rounds, which the repetitions' own spread does not see (they are
    not independent: a slow minute slows a whole round). Empty in a profile written before it kept it."""
    spread_drift: float = 0.0
    """How far the machine's speed moved from one in-situ round to the next beyond the steps' own noise (a relative
    standard deviation, `pipesim.analysis.drift.speed_drift`): how far the run a prediction is for may sit from the
    profile's speed. 0 in a profile written before it kept it."""
    spread_launch: float = 0.0
    """How far the levels of the profile's launches sat apart (the standard deviation of their logs,
    `pipesim_executor.host.profile_merge.launch_spread`), a part of `spread_drift`; 0 for one launch."""
    spread_launches: int = 1
    """How many launches the profile merged (`spread_launch` is read off them)."""

    def __post_init__(self) -> None:
        if not self.units:
            raise ValueError("a unit profile needs at least one unit")
        for (size, start, stop), times in self.stages.items():
            if size not in self.microbatch_sizes or not 0 <= start < stop <= len(self.units):
                raise ValueError(
                    f"a measured stage must be units start..stop-1 of the {len(self.units)} at a profiled size "
                    f"{list(self.microbatch_sizes)}, got size {size}, units {start}..{stop - 1}"
                )
            if set(times) != set(TIME_KINDS):
                raise ValueError(f"the measured stage {start}..{stop - 1} at size {size} needs every kind {TIME_KINDS}")
            for value in times.values():
                check_finite_non_negative("a measured stage's time", value)
        unknown = set(self.in_situ) - set(IN_SITU_CLASSES)
        if unknown:
            raise ValueError(f"unknown in-situ class {sorted(unknown)[0]!r}; valid: {', '.join(IN_SITU_CLASSES)}")
        for name, terms in self.in_situ.items():
            for kind, curve in (*terms.scale.items(), *terms.ci.items()):
                if curve.sizes != self.microbatch_sizes:
                    raise ValueError(f"in-situ {name}: the scale of {kind} must give one factor per profiled size")
            for size, start, stop in terms.stages:
                if size not in self.microbatch_sizes or not start < stop <= len(self.units):
                    raise ValueError(
                        f"in-situ {name}: a stage's factors must be of units start..stop-1 of the {len(self.units)} at "
                        f"a profiled size {list(self.microbatch_sizes)}, got size {size}, units {start}..{stop - 1}"
                    )
        for unit in self.units:
            for kind, curve in unit.curves.items():
                if curve.sizes != self.microbatch_sizes:
                    raise ValueError(
                        f"unit {unit.name!r}: {kind} was measured at sizes {list(curve.sizes)}, the profile at "
                        f"{list(self.microbatch_sizes)}"
                    )
        for kind, curve in (*self.spread.items(), *self.spread_round_se.items()):
            if kind not in TIME_KINDS or curve.sizes != self.microbatch_sizes or curve.monotone:
                raise ValueError(f"the spread of {kind!r} must be a ratio curve of a time kind at every profiled size")
        if isinstance(self.spread_repeats, bool) or not isinstance(self.spread_repeats, int) or self.spread_repeats < 0:
            raise ValueError(f"spread_repeats must be a whole number >= 0, got {self.spread_repeats!r}")
        if isinstance(self.spread_drift, bool) or not isinstance(self.spread_drift, (int, float)):
            raise ValueError(f"spread_drift must be a number in 0..1, got {self.spread_drift!r}")
        if not 0 <= self.spread_drift <= 1:
            raise ValueError(f"spread_drift must be a number in 0..1, got {self.spread_drift!r}")
        launch = self.spread_launch
        if isinstance(launch, bool) or not isinstance(launch, (int, float)) or not 0 <= launch <= 1:
            raise ValueError(f"spread_launch must be a number in 0..1, got {launch!r}")
        count = self.spread_launches
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise ValueError(f"spread_launches must be a whole number from 1 to 1000, got {count!r}")
        for name in ("dispatch_ms", "tail_ms"):
            check_finite_non_negative(name, getattr(self, name))
        if self.core_slots is not None and (
            isinstance(self.core_slots, bool) or not isinstance(self.core_slots, int) or self.core_slots < 1
        ):
            raise ValueError(f"core_slots must be a positive integer or None, got {self.core_slots!r}")

    def unit_costs(self, size: int, split: bool = False, recompute: bool = False) -> tuple[StageCost, ...]:
        """Every unit's costs for one microbatch of `size` (see `ProfiledUnit.cost_at`)."""
        return tuple(unit.cost_at(size, split, recompute) for unit in self.units)

    def in_situ_terms(self, split: bool, chunked: bool) -> InSituTerms:
        """The in-situ terms of a schedule's class (its unchunked sibling's when not measured, else the profile's
        overall dispatch gap and tail, unscaled)."""
        for name in (schedule_class(split, chunked), schedule_class(split, False)):
            if name in self.in_situ:
                return self.in_situ[name]
        return InSituTerms(self.dispatch_ms, self.tail_ms)

    def stage_kinds(self, size: int, start: int, stop: int, in_situ: InSituTerms | None = None) -> dict[str, float]:
        """Every kind's time (TIME_KINDS) of the stage holding units start..stop-1 for one microbatch of `size`:
        as the profile timed it whole where it did (at a profiled size as measured, at another on the line through
        the nearest two when it was timed at every profiled size), else its units' shares plus what a stage pays at
        a cut start and a cut end; then, with `in_situ`, each kind scaled by its in-situ factor. Read off the
        non-decreasing fit of those times at the profiled sizes (`SizeCurve`): no size is cheaper than a smaller
        one, whatever noise the measured stages and the factors carry."""
        sizes = self.microbatch_sizes
        rows = [self._stage_kinds_at(s, start, stop, in_situ) for s in sizes]
        return {k: SizeCurve(sizes, tuple(max(0.0, row[k]) for row in rows)).at(size) for k in TIME_KINDS}

    def _stage_kinds_at(self, size: int, start: int, stop: int, in_situ: InSituTerms | None) -> dict[str, float]:
        """`stage_kinds` at one profiled size, before the fit across sizes."""
        times = self.stages.get((size, start, stop))
        if times is None:
            cut_start, cut_end = start > 0, stop < len(self.units)
            times = {
                k: sum(u.curves[k].at(size) for u in self.units[start:stop])
                + (self.action.start.get(k, 0.0) if cut_start else 0.0)
                + (self.action.end.get(k, 0.0) if cut_end else 0.0)
                for k in TIME_KINDS
            }
        if in_situ is None:
            return dict(times)
        return {k: v * in_situ.factor(k, size, start, stop) for k, v in times.items()}

    def stage_costs(
        self, size: int, start: int, stop: int, split: bool, recompute: bool = False, chunked: bool = False
    ) -> dict[str, float]:
        """The stage's forward_ms, backward_ms and weight_ms for a plain, split or recomputing candidate, one stage
        per rank or chunked (`stage_kinds` with its class's in-situ factors, through `action_costs`): what the
        planner prices a stage of a cut with."""
        kinds = self.stage_kinds(size, start, stop, self.in_situ_terms(split, chunked))
        return action_costs(kinds, split, recompute)

    def runtime_terms(self, optimizer: str, split: bool = False, chunked: bool = False) -> RuntimeTerms:
        """The per-rank terms of a run with `optimizer` (refused when the profile did not time it: an optimizer is
        never silently replaced by another) of a schedule of this class: its in-situ dispatch gap and tail."""
        if optimizer not in self.optimizers:
            timed = ", ".join(sorted(self.optimizers)) or "none"
            raise ValueError(
                f"the profile timed no {optimizer!r} optimizer step (it timed: {timed}); profile again with "
                f"--optimizers {optimizer}, or plan with --optimizer one of those"
            )
        terms = self.in_situ_terms(split, chunked)
        return RuntimeTerms(terms.dispatch_ms, terms.tail_ms, self.optimizers[optimizer], self.core_slots)

    def fits(self) -> list[dict]:
        """Per unit and kind, the affine fit a + b x size and its relative residual (what the file reports)."""
        out = []
        for unit in self.units:
            row: dict = {"name": unit.name}
            for kind in (*TIME_KINDS, *BYTE_KINDS, *(k for k in OPTIONAL_BYTE_KINDS if k in unit.curves)):
                curve = unit.curves[kind]
                a, b = curve.affine()
                row[kind] = {"a": a, "b": b, "residual": curve.residual()}
            out.append(row)
        return out

    def worst_residual(self, kinds: Sequence[str] = TIME_KINDS) -> float:
        """The largest affine residual over the units' times: how bent the worst size curve is."""
        return max((u.curves[k].residual() for u in self.units for k in kinds), default=0.0)
