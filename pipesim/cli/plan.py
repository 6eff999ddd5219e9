"""`python -m pipesim plan` and `python -m pipesim balance`: the planner and stage balancing on the command line.

Usage:
  python -m pipesim balance --layer-ms 1,4,4,4,4,6 --stages 2
  python -m pipesim balance --layers 24 --hidden 2048 --stages 8          (a model description's units)
  python -m pipesim plan --layers 24 --hidden 2048 --devices 8 --memory-cap 80GiB --global-batch 64 \\
      --schedules 1f1b,interleaved-1f1b,zb-h1,zbv --microbatch-sizes 1,2,4 --chunks 1,2 --recompute both \\
      --w-shares 0.4,0.5 --json plan.json [--verify 3]
  python -m pipesim plan --cost cost.json --devices 2 --global-batch 16 ...   (a profile's stages as units)
  python -m pipesim plan ... --memory-cap 40GiB --host-gbps 25   (offload tried where a candidate is over the cap)

`balance` prints the split points in the form `executor run --split-points` takes (unit indices where each stage
after the first starts). `plan` prints a summary (the best candidate that fits, why the runners-up lost) and,
with --json, the whole plan. `--verify K` then runs the top K candidates for real through
`python -m executor verify-plan OUT --top K` (a separate process: pipesim does not import the executor).
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from pipesim.analysis.calibration import calibrate_from_run
from pipesim.analysis.profile_check import check_line
from pipesim.cli import whatif
from pipesim.cli.common import (
    add_host_link_args,
    host_link_from_args,
    positive_int,
    summary_stream,
    written_lines,
)
from pipesim.cli.plan_synth import add_synth_args, add_synthesized, take_synthesized, write_recommended_csv
from pipesim.cost.balance import balance, format_split_points
from pipesim.cost.description import ModelDescription, unit_weight
from pipesim.cost.profile import UnitProfile
from pipesim.cost.runtime import OPTIMIZERS
from pipesim.flags import (
    EXIT_STATUS_HELP,
    FAILURE,
    UsageError,
    add_flags,
    float_flag,
    float_list_flag,
    given,
    given_flags,
    int_flag,
    int_list_flag,
    shown,
)
from pipesim.io.cost_file import load_cost_file
from pipesim.io.formats import check_output, write_json
from pipesim.io.launch_history import ENV as LAUNCH_HISTORY_ENV
from pipesim.limits import MAX_BYTES, MAX_DEVICES, MAX_LAYERS, MAX_MICROBATCHES, MAX_TIME_MS, check_sizes
from pipesim.numbers import MAX_LIST_ITEMS, read_float
from pipesim.plan.candidates import OFFLOAD_CHOICES, PlanSpace
from pipesim.plan.in_situ_check import accepted_disturbance
from pipesim.plan.intervals import (
    INTERVAL_OF,
    IntervalOptions,
    attach_intervals,
    interval_of,
    machine_launch_spread,
    measured_by,
)
from pipesim.plan.report import TRANSFORMER_UNITS, best_candidate, plan_document
from pipesim.programs import named_as_started, programs
from pipesim.progress_bar import ProgressBar
from pipesim.schedules import schedule_names
from pipesim.sim.jitter import DEFAULT_SAMPLES
from pipesim.sim.spread import VERIFY_ROUNDS, VERIFY_STEPS

if TYPE_CHECKING:  # the planner's modules are imported by the commands that run them (a fast start for the rest)
    from pipesim.plan.inputs import PlanInputs

UNITS_HELP = (
    "Split points are unit indices, as `python -m executor run --split-points` takes them: a model's units are its "
    "embedding (unit 0), its blocks (1 to --layers) and its output head (the last); a cost file's units are its stages."
)
MODEL_SECTION = "model"  # the flags of ModelDescription's fields (pipesim.flags), under this section
_SIZE = re.compile(r"([0-9.eE+-]+)([KMGT]i?B|B)?", re.IGNORECASE)
_FACTORS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> float:
    """`80GiB`, `40GB`, `1.5e9` -> bytes: a finite number >= 0 (pipesim.numbers) of at most MAX_BYTES."""
    match = _SIZE.fullmatch(text)
    try:
        if not match:
            raise ValueError(f"expected a size such as 80GiB, 40GB or 1e9 (bytes), got {shown(text)}")
        value = read_float(match.group(1), minimum=0) * _FACTORS[(match.group(2) or "B").lower()]
        if value > MAX_BYTES:
            raise ValueError(f"expected a size of at most {MAX_BYTES:.0e} bytes, got {shown(text)}")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


_ints = int_list_flag(minimum=1, maximum=MAX_MICROBATCHES)  # sizes, chunks, ranks to try; stages to balance
_floats = float_list_flag(minimum=0, maximum=MAX_TIME_MS)  # per-layer times in ms, W shares


def _layer_ms(text: str) -> tuple[float, ...]:  # --layer-ms's times; past a command line's limit, where more go
    if text.count(",") >= MAX_LIST_ITEMS:
        raise argparse.ArgumentTypeError(
            f"at most {MAX_LIST_ITEMS:,} times on the command line, got {text.count(',') + 1:,}; --cost FILE takes "
            f"up to {MAX_LAYERS:,} (pipesim.io.cost_file.save_cost(pipesim.cost_from_times(F, B), FILE) writes one)"
        )
    return _floats(text)


_layer_ms.__name__ = _floats.__name__  # argparse names the value's kind by it ("invalid numbers value")


def _names(text: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated schedule names from: {', '.join(schedule_names())}")
    return names


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    """The model's flags, generated from ModelDescription's fields (their docstrings are the help)."""
    add_flags(parser, ModelDescription, MODEL_SECTION)
    parser.add_argument(
        "--cost",
        type=Path,
        metavar="FILE",
        help=f"a cost file instead of a model: a model profiled unit by unit ({programs().executor} profile: any "
        f"split, any microbatch size, measured runtime terms), or a run's stage costs ({programs().executor} run "
        "--profile: its stages are the units)",
    )


def add_commands(commands: argparse._SubParsersAction) -> None:
    bal = commands.add_parser(
        "balance",
        allow_abbrev=False,
        help="split layers into stages, slowest stage fastest",
        description=named_as_started(UNITS_HELP),
        epilog=EXIT_STATUS_HELP,
    )
    bal.add_argument(
        "--layer-ms", type=_layer_ms, metavar="T,T,..", help="per-layer (unit) F+B time, instead of a model"
    )
    bal.add_argument("--stages", type=_ints, required=True, metavar="S", help="number of stages (ranks x chunks)")
    _add_model_args(bal)

    plan = commands.add_parser(
        "plan",
        allow_abbrev=False,
        help="search schedules and sizes under a memory cap",
        description=named_as_started(UNITS_HELP),
        epilog=EXIT_STATUS_HELP + " plan: 1 also when no candidate fits.",
    )
    _add_model_args(plan)
    plan.add_argument(
        "--devices",
        type=int_flag(1, MAX_DEVICES),
        required=True,
        metavar="D",
        help="devices in all: pipeline ranks x replicas",
    )
    plan.add_argument("--global-batch", type=int_flag(1, 2**40), required=True, metavar="B", help="samples per step")
    plan.add_argument("--memory-cap", type=parse_bytes, metavar="SIZE", help="per device, e.g. 80GiB (default none)")
    plan.add_argument(
        "--optimizer", default="adam", help=f"{', '.join(OPTIMIZERS)} (state bytes per parameter; default adam)"
    )
    space = plan.add_argument_group("what to search")
    defaults = PlanSpace()
    space.add_argument(
        "--schedules",
        type=_names,
        default=defaults.schedules,
        metavar="A,B",
        help=f"registered schedules to try (default {','.join(defaults.schedules)}); synthesized adds orders "
        "synthesized for each shape (--synth-budget)",
    )
    space.add_argument(
        "--microbatch-sizes",
        type=_ints,
        metavar="N,N",
        help="samples per microbatch to try (default: a profile's own sizes, else "
        f"{','.join(map(str, defaults.microbatch_sizes))})",
    )
    space.add_argument(
        "--extrapolate",
        action="store_true",
        help="plan microbatch sizes outside the profiled ones too, marked extrapolated with a wider interval and "
        "never recommended while a profiled size fits (default: refused, naming the profile command that adds them)",
    )
    space.add_argument(
        "--accept-disturbed-profile",
        action="store_true",
        help="plan from a profile whose check against its own in-situ steps shows a bias beyond the spread it "
        "reports (other work disturbed it): the plan is marked (default: refused, with the load the profile saw)",
    )
    space.add_argument(
        "--chunks",
        type=_ints,
        default=defaults.chunks,
        metavar="V,V",
        help="chunks per rank for the families that take them",
    )
    space.add_argument(
        "--recompute", choices=("off", "on", "both"), default="both", help="activation recomputation (default both)"
    )
    space.add_argument(
        "--w-shares", type=float_list_flag(0, 1), metavar="X,X", help="W share of the backward (default: the model's)"
    )
    space.add_argument(
        "--offload",
        choices=OFFLOAD_CHOICES,
        default=defaults.offload,
        help="activation offload to host memory, priced by --host-gbps/--host-latency: auto (default) tries "
        "selective and full offload on a candidate over --memory-cap where a host link is priced; selective or "
        "full tries that mode on every candidate; none never",
    )
    add_host_link_args(space)
    space.add_argument(
        "--ranks",
        type=_ints,
        metavar="P,P",
        help="pipeline depths (default: all devices); the rest of the devices are data-parallel replicas",
    )
    plan.add_argument(
        "--calibrate-from",
        type=Path,
        metavar="RUN_DIR",
        help="fit the description's device speed (--tflops) and per-action overhead to a measured run of the "
        f"executor's Transformer on these devices ({programs().executor} run --model transformer ...)",
    )
    plan.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="processes that evaluate candidates (default: one per core, for spaces of more than 200 candidates); "
        "at most the cores this process may use (a larger number is capped, and the output says so)",
    )
    plan.add_argument(
        "--exhaustive",
        action="store_true",
        help="build and simulate every candidate (default: prune those whose lower bound shows they cannot be the "
        "best, one of the next fastest or on the Pareto front; the answer is the same)",
    )
    sampling = plan.add_argument_group("intervals (each candidate's step sampled from its actions' spread)")
    sampling.add_argument(
        "--jitter",
        type=float_flag(minimum=0, maximum=10),
        metavar="CV",
        help="coefficient of variation of every action's time (0.1 = 10%%) where the model measured none (a "
        "profile's own spread is used otherwise); default: no interval without a profile's spread",
    )
    sampling.add_argument("--samples", type=positive_int, default=DEFAULT_SAMPLES, metavar="N", help="draws per step")
    sampling.add_argument("--seed", type=int_flag(0, 2**32 - 1), default=0, metavar="S", help="seed of the draws")
    sampling.add_argument(
        "--interval-of",
        choices=["auto", *INTERVAL_OF],
        default="auto",
        help="what the interval is of: one step, or the median step of verify-plan's default measurement "
        f"({VERIFY_ROUNDS} launches of at least {VERIFY_STEPS} steps: narrower; over-confident on held-out models "
        "when only the profile's launches say how far launches land apart, docs/benchmarks.md); auto (the "
        "default): the median's where the machine's launch history holds this machine's spread, else one step's",
    )
    plan.add_argument(
        "--launch-history",
        metavar="PATH|none",
        default=None,
        help="the record of how far launches landed apart in earlier verifications on this machine (verify-plan "
        f"writes it; default ${LAUNCH_HISTORY_ENV} or ~/.cache/pipesim/launch_spread.jsonl): where it holds "
        "enough, the intervals carry that spread rather than the profile's two launches'; none: ignore it",
    )
    whatif.add_perturbation_args(plan, devices=True)
    add_synth_args(plan)
    plan.add_argument("--json", type=Path, metavar="OUT", help="write the plan (- for standard output)")
    plan.add_argument("--verify", type=int_flag(1, 1000), metavar="K", help="run the top K for real (needs --json)")


def description_from_args(args: argparse.Namespace) -> ModelDescription:
    return ModelDescription(**given(args, MODEL_SECTION))


def _model_given(args: argparse.Namespace) -> list[str]:
    return given_flags(args, ModelDescription, MODEL_SECTION)


def cmd_balance(args: argparse.Namespace) -> int:
    from pipesim.io.stage_times import stage_times_ms

    if args.layer_ms is not None:
        if args.cost or _model_given(args):
            raise ValueError("--layer-ms replaces the model: drop --cost and the model flags")
        weights = list(args.layer_ms)
    elif args.cost is not None:
        weights = stage_times_ms(args.cost)  # linear in the file (10^6 stages): pipesim.io.stage_times
    else:
        weights = [unit_weight(u.forward_ms, u.backward_ms) for u in description_from_args(args).unit_costs()]
    for stages in args.stages:
        result = balance(weights, stages)
        costs = ", ".join(f"{c:.4g}" for c in result.stage_costs)
        print(f"{stages} stages: --split-points {format_split_points(result.split_points) or '(none)'}")
        print(f"  per-stage F+B ms: {costs}; slowest {result.bottleneck:.4g} ms, {result.imbalance:.3f}x the mean")
    return 0


def inputs_from_args(args: argparse.Namespace) -> tuple[PlanInputs, dict]:
    from pipesim.plan.inputs import PlanInputs

    common = dict(
        devices=args.devices, global_batch=args.global_batch, memory_cap_bytes=args.memory_cap, optimizer=args.optimizer
    )
    if args.cost is not None:
        if _model_given(args):
            raise ValueError(f"--cost replaces the model description: drop {', '.join(_model_given(args))}")
        if args.calibrate_from is not None:
            raise UsageError("--calibrate-from calibrates a model description; a cost file is measured already")
        loaded = load_cost_file(args.cost)
        if isinstance(loaded, UnitProfile):  # a model profiled per unit: what verify-plan rebuilds and runs
            run = {key: loaded.provenance.get(key) for key in ("device", "dtype")}
            recorded = {**common, "cost_file": str(args.cost), "executor_model": dict(loaded.model), "run": run}
            return PlanInputs.from_profile(loaded, **common), recorded
        return PlanInputs.from_cost(loaded, **common), {**common, "cost_file": str(args.cost)}
    description = description_from_args(args)
    if args.calibrate_from is not None:
        calibration = calibrate_from_run(args.calibrate_from)
        description, runtime = calibration.apply(description)
        recorded = {**common, "model": vars_of(description), "calibrated_from": calibration.to_dict()}
        return PlanInputs.from_description(description, runtime=runtime, **common), recorded
    return PlanInputs.from_description(description, **common), {**common, "model": vars_of(description)}


def vars_of(description: ModelDescription) -> dict:
    return {f.name: getattr(description, f.name) for f in fields(description)}


def space_from_args(args: argparse.Namespace, inputs: PlanInputs | None = None) -> PlanSpace:
    """The search space of the flags; without --microbatch-sizes a profile's own sizes (what it measured)."""
    recompute = {"off": (False,), "on": (True,), "both": (False, True)}[args.recompute]
    sizes = args.microbatch_sizes
    if sizes is None:
        profiled = None if inputs is None or inputs.profile is None else inputs.profile.microbatch_sizes
        sizes = tuple(profiled) if profiled else PlanSpace().microbatch_sizes
    return PlanSpace(
        schedules=args.schedules,
        microbatch_sizes=sizes,
        extrapolate=args.extrapolate,
        chunks=args.chunks,
        recompute=recompute,
        w_shares=args.w_shares or (None,),
        ranks=args.ranks,
        offload=args.offload,
    )


def _workers(given: int | None, space: PlanSpace) -> tuple[int, str | None]:
    """Processes for the search and a note for the output: --workers capped at the usable cores (more processes
    than cores only share them, each holding its own schedules); by default one per core for a space large
    enough to repay starting processes (about 0.1 s each), else one."""
    from pipesim.plan.pool import usable_cores

    cores = usable_cores()
    if given is not None:
        if given > cores:
            return cores, f"note: --workers {given} capped at {cores}, the cores this process may use"
        return given, None
    size = len(space.schedules) * len(space.microbatch_sizes) * len(space.chunks) * len(space.w_shares)
    return (cores if size * len(space.ranks or (1,)) * len(space.recompute) > 200 else 1), None


def cmd_plan(args: argparse.Namespace) -> int:
    from pipesim.plan.offload import skipped_note
    from pipesim.plan.prune import KEEP
    from pipesim.plan.search import evaluate_all

    if args.verify is not None and (args.json is None or args.verify < 1):
        raise UsageError("--verify K needs K >= 1 and --json OUT (the plan the verification reads)")
    if args.ranks is None:  # every device in one pipeline: as many ranks
        check_sizes(num_ranks=args.devices)
    if args.json is not None:
        check_output(args.json)
    with_synthesized = take_synthesized(args)
    perturbation = whatif.perturbation_from_args(args, args.devices if args.devices >= 1 else None)
    inputs, recorded = inputs_from_args(args)
    launches, launches_line = machine_launch_spread(inputs.profile, args.launch_history)
    between = None if launches is None else launches.between
    measurement = measured_by(args.interval_of, launches)
    options = IntervalOptions(args.jitter, args.samples, args.seed, measurement, between)
    if launches is not None:
        recorded = {**recorded, "launch_spread": {**launches.to_dict(), "between": between}}
    if perturbation:
        inputs = replace(inputs, perturbation=perturbation)
        recorded = {**recorded, "perturbation": perturbation.to_dict()}
    if args.host_gbps is not None or args.host_latency is not None:
        inputs = replace(inputs, host_link=host_link_from_args(args, inputs.host_link))
        recorded = {**recorded, "host_link": {"host_gbps": args.host_gbps, "host_latency_ms": args.host_latency}}
    space = space_from_args(args, inputs)
    inputs.check_sizes(space.microbatch_sizes, space.extrapolate, profile_program())
    disturbed = None if inputs.profile is None else accepted_disturbance(inputs.profile, args)
    workers, workers_note = _workers(args.workers, space)
    keep = max(KEEP, args.verify or 0)  # verify's top K are among the candidates pruning keeps
    with ProgressBar("plan") as bar:
        progress = lambda done, total: bar.set(done / total, f"{done}/{total} candidates")  # noqa: E731
        candidates = evaluate_all(
            inputs, space, progress=progress, workers=workers, prune=not args.exhaustive, keep=keep
        )
    candidates = attach_intervals(inputs, candidates, options)
    synthesized = add_synthesized(inputs, space, candidates, args.synth_budget) if with_synthesized else {}
    searched = {**_space_dict(space), **({"synthesized_budget_s": args.synth_budget} if with_synthesized else {})}
    recorded = {**recorded, "space": searched, "interval_of": interval_of(options.measurement)}
    document = plan_document(candidates, recorded, args.memory_cap, units_meaning(recorded))
    document["calibration"] = {**inputs.calibration(), **({} if disturbed is None else {"disturbance": disturbed})}
    lines = list(document["summary"])
    if workers_note is not None:
        lines.insert(1, workers_note)
    offload_note = skipped_note(space.offload, inputs, candidates)
    if offload_note is not None:
        lines.insert(1, offload_note)
    if not document["calibration"]["calibrated"]:
        lines.insert(1, "note: " + document["calibration"]["note"])
    if launches_line:
        lines.insert(1, launches_line)
    lines[1:1] = check_line(document["calibration"].get("check"))  # how far the profile predicts its own steps
    if disturbed is not None and disturbed["disturbed"]:
        lines.insert(1, f"warning: planned from a disturbed profile (--accept-disturbed-profile): {disturbed['line']}")
    failed = [c for c in candidates if c.error is not None]
    reasons = sorted({c.error for c in failed})
    for reason in reasons[:5]:
        lines.append(f"  cannot be built ({sum(c.error == reason for c in failed)}): {reason}")
    if args.csv is not None:
        lines += write_recommended_csv(args.csv, best_candidate(candidates), inputs, synthesized)
    if args.json is not None:  # before printing: a closed stdout (| head) must not lose the plan
        write_json(document, args.json)
        lines += written_lines(args.json)
    print("\n".join(lines), flush=True, file=summary_stream(args.json, args.csv))
    if args.verify:
        command = [sys.executable, "-m", "pipesim_executor", "verify-plan", str(args.json), "--top", str(args.verify)]
        print(
            "verifying: " + shlex.join(command), flush=True, file=summary_stream(args.json, args.csv)
        )  # the user can run it again
        return subprocess.run(command, check=False).returncode
    return 0 if document["best"] is not None else FAILURE


def units_meaning(recorded: dict) -> str:
    """What the plan's unit indices count: a profiled model's layers (a custom one's hold no embedding or head)."""
    model = recorded.get("executor_model") if isinstance(recorded.get("executor_model"), dict) else {}
    if model.get("kind") in ("custom", "cnn"):
        return f"units are the layers of {model.get('spec') or 'the CNN'}, from 0"
    return "units are the cost file's stages, from 0" if "cost_file" in recorded and not model else TRANSFORMER_UNITS


def profile_program() -> str:
    """The executor's profile command as this user runs programs: the console script after `pipesim`, else the
    module after `python -m pipesim`."""
    return "pipesim-run profile" if Path(sys.argv[0]).name == "pipesim" else "python -m pipesim_executor profile"


def _space_dict(space: PlanSpace) -> dict:
    return {f.name: getattr(space, f.name) for f in fields(space)}


COMMANDS = MappingProxyType({"balance": cmd_balance, "plan": cmd_plan})
