"""pipesim on the command line: list schedules, simulate one, compare several.

Usage:
  python -m pipesim list
  python -m pipesim simulate --schedule 1f1b --ranks 4 --microbatches 8
  python -m pipesim simulate --schedule interleaved-1f1b --ranks 4 --microbatches 8 --virtual-stages 2 \\
      --f 1.0 --b 2.0 --w 1.0 --comm 0.1 --json tl.json --csv sched.csv --trace trace.json --html gantt.html
  python -m pipesim simulate --csv-in my_schedule.csv --cost cost.json --png gantt.png
  python -m pipesim simulate --csv-in torch_dump.csv --overlap-factor 0.7 --data-parallel 8 --dp-bandwidth 50 \
      --csv comms.csv --csv-format compute_comms
  python -m pipesim compare --schedules 1f1b,zb-h1,zbv --ranks 4 --microbatches 8 --json rows.json --html cmp.html
  python -m pipesim balance --layer-ms 1,4,4,4,4,6 --stages 2          (see pipesim/cli/plan.py)
  python -m pipesim plan --layers 24 --devices 8 --memory-cap 80GiB --global-batch 64 --json plan.json
  python -m pipesim synthesize --ranks 4 --microbatches 8 --f 1 --b 2 --w 1 --memory-limit 4 \\
      --csv synth.csv --json synth.json                                  (see pipesim/cli/synthesize.py)
  python -m pipesim import-trace runs/NAME/traces/torch-rank0.json runs/NAME/traces/torch-rank1.json \\
      --schedule-out sched.json --json imported.json --trace both.json --html overlay.html

Times are milliseconds per microbatch, per rank: one number, or a comma-separated list with one per
rank; a schedule holding several chunks per rank cuts each rank's share into its chunks (a list with
one per stage is taken as given). `simulate`, `compare` and the app read them alike
(`CostModel.for_pipeline`). `--b` is the full backward, `--w` its weight-gradient part (so I = B - W;
without --w, half of B). `--comm` is the time of one cross-rank transfer. `--cost FILE` reads
a pipesim cost file instead (e.g. from an executor profile run). `--overlap-factor`
prices torch's overlapped forward-backward pairs (pair = factor x (F + B)); `--data-parallel`,
`--sharded`, `--dp-latency`, `--dp-bandwidth` and `--grad-bytes` describe the data-parallel group:
each stage's gradients all-reduced in 25 MiB buckets after its last backward, as the executor does, or
where the schedule states REDUCE_GRAD; with --sharded, torch's UNSHARD and reduce-scatter where torch's
lowering puts them (pipesim.sim.data_parallel decides which, for every command).

`--csv-in` reads torch's CSV in either of its formats (compute_only, or compute_comms with
every send and receive; detected, or named with --csv-in-format); stated transfers set when
each message leaves its rank.

Outputs: --json the timeline document with a metrics summary, --csv the schedule in
torch.distributed.pipelining's CSV format (--csv-format compute_only or compute_comms;
by default the form the schedule has), --trace a Chrome trace
(open in https://ui.perfetto.dev), --html/--png/--svg/--pdf the Gantt chart
(images need Chromium). Every output is checked before any work and written before anything is printed, with
the umask's mode (a replaced file keeps its own). Exit status: 0 done; 1 the work failed or was refused (a
deadlocked schedule, an output that cannot be written, an image that cannot be rendered); 2 a usage error (one
line on stderr, nothing written); 141 stdout closed early (`| head`; the files were written).

`import-trace` reads torch.profiler (Kineto) traces whose actions carry torch's `PP:<action>` labels
(torch.distributed.pipelining's multi-stage runtime, or `python -m executor run --torch-profile`),
recovers the schedule each rank ran and its timeline (source "imported"), simulates that schedule (with
the given costs, else the traces' own median action times) and overlays the two; --trace writes both
into one Chrome trace.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from pipesim._perf import paused_gc
from pipesim.charts.export import ExportUnavailable
from pipesim.cli import whatif
from pipesim.cli.common import (
    Parser,
    UsageError,
    add_cost_args,
    add_figure_args,
    add_knob_args,
    add_sampling_args,
    check_outputs,
    cost_from_args,
    knob_options,
    ms_list,
    positive_int,
    sampling_from_args,
    span_texts,
    summary_stream,
    write_figures,
    written_lines,
)
from pipesim.cli.listing import cmd_list
from pipesim.cost.model import CostModel
from pipesim.flags import EXIT_STATUS_HELP, run_main
from pipesim.io.cost_file import cost_to_dict
from pipesim.io.formats import (
    UnwritableOutput,
    json_text,
    schedule_from_csv_file,
    schedule_to_csv,
    schedule_to_dict,
    timeline_text,
    write_files,
)
from pipesim.io.torch_csv import CSV_FORMATS, dialect_note
from pipesim.ir import Schedule
from pipesim.programs import programs
from pipesim.records import Timeline
from pipesim.schedules import build_schedule
from pipesim.semantics.dag import DeadlockError, forget_lowering
from pipesim.semantics.lower import back_to_back
from pipesim.semantics.validate import validate
from pipesim.sim.data_parallel import ALLREDUCE
from pipesim.sim.metrics import Metrics, compute_metrics, link_busy_ms, with_link_busy
from pipesim.sim.offload import with_offload
from pipesim.sim.steps import SimulatedStep, simulate_step
from pipesim.units import format_bytes, format_memory

if TYPE_CHECKING:  # sampled steps, their spread and traces load where a run asks for them (a lean `simulate`)
    from pipesim.sim.jitter import StepInterval

# --- parser ---------------------------------------------------------------------------


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone: a run builds only its own command's flags (the
    others' hundreds of flags took a fifth of an in-process `simulate` of 16k actions)."""
    parser = Parser(
        prog=programs().pipesim,
        description="Plan and explain pipeline-parallel schedules.",
        epilog=EXIT_STATUS_HELP,
        allow_abbrev=False,
    )
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="{list,simulate,compare,import-trace,balance,plan,synthesize,stragglers,app}",
    )
    if command in (None, "list"):
        commands.add_parser(
            "list",
            allow_abbrev=False,
            help="registered schedules, what they are and their options",
            description="Every registered schedule family: its name (what --schedule and --schedules take), what it "
            "is, whether it splits the backward into I and W, and the options it takes.",
            epilog=EXIT_STATUS_HELP,
        )
    if command in (None, "simulate"):
        _add_simulate(commands)
    for module in dict.fromkeys(COMMAND_MODULES.values()):  # each once, in the order of the help
        if command is None or COMMAND_MODULES.get(command) == module:
            importlib.import_module(module).add_commands(commands)
    return parser


def _add_simulate(commands: argparse._SubParsersAction) -> None:
    sim = commands.add_parser(
        "simulate", allow_abbrev=False, help="simulate one schedule and write its timeline", epilog=EXIT_STATUS_HELP
    )
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--schedule", metavar="NAME", help="registered schedule (see `list`)")
    source.add_argument("--csv-in", type=Path, metavar="FILE", help="torch's schedule CSV (either format)")
    sim.add_argument("--ranks", type=positive_int, metavar="P", help="pipeline ranks (with --schedule)")
    sim.add_argument("--microbatches", type=positive_int, metavar="M", help="microbatches per step (with --schedule)")
    sim.add_argument("--virtual-stages", type=positive_int, metavar="V", help="stages per rank (interleaved)")
    sim.add_argument(
        "--sequential-pairs",
        action="store_true",
        help="run each overlapped pair (OVERLAP_F_B) as torch's runtime does by default: its members one after "
        "the other, each waiting only for its own inputs (default: overlapped, priced layer by layer)",
    )
    sim.add_argument(
        "--csv-in-format",
        choices=CSV_FORMATS,
        default="auto",
        help="the format of --csv-in (default: auto, compute_comms when it has sends or receives)",
    )
    add_knob_args(sim)
    add_cost_args(sim)
    add_sampling_args(sim)
    whatif.add_perturbation_args(sim)
    steps = sim.add_argument_group("steps (the step as a training loop runs it; see pipesim.sim.steps)")
    steps.add_argument(
        "--overhead",
        type=ms_list,
        metavar="T",
        help="per-step time after each rank's last action: optimizer, zeroing (one value or per rank)",
    )
    steps.add_argument(
        "--dispatch",
        type=ms_list,
        metavar="T",
        help="gap before each action a rank starts (one value or per rank; default 0)",
    )
    steps.add_argument(
        "--shared-cores",
        type=positive_int,
        metavar="N",
        help="the ranks share N cores (CPU ranks on one machine): at most N compute at full speed",
    )
    steps.add_argument("--steps", type=positive_int, default=1, metavar="N", help="simulate N steps in a row")
    steps.add_argument(
        "--no-barrier",
        action="store_true",
        help="with --steps: a rank starts the next step when its own optimizer is done (default: "
        "every rank waits for the last, as pipesim's executor does)",
    )
    outputs = sim.add_argument_group("outputs")
    outputs.add_argument(
        "--json", type=Path, metavar="OUT", help="timeline document with a metrics summary (- for standard output)"
    )
    outputs.add_argument("--csv", type=Path, metavar="OUT", help="the schedule as torch's CSV (- for standard output)")
    outputs.add_argument(
        "--csv-format",
        choices=CSV_FORMATS,
        default="auto",
        help="format of --csv: compute_only, or compute_comms with torch's sends, receives "
        "and collectives (default: auto, the form the schedule has)",
    )
    outputs.add_argument(
        "--trace", type=Path, metavar="OUT", help="Chrome trace (Perfetto), with a flow arrow per message between ranks"
    )
    add_figure_args(outputs, "Gantt chart")


# --- building inputs ----------------------------------------------------------------


def schedule_from_args(args: argparse.Namespace) -> Schedule:
    if args.csv_in is not None:
        if args.ranks or args.microbatches or args.virtual_stages:
            raise UsageError(
                "--csv-in takes ranks, microbatches and stages from the CSV: "
                "drop --ranks, --microbatches and --virtual-stages"
            )
        return schedule_from_csv_file(args.csv_in, args.csv_in_format)
    if args.ranks is None or args.microbatches is None:
        raise UsageError("--schedule needs --ranks and --microbatches")
    options = {} if args.virtual_stages is None else {"num_virtual_stages": args.virtual_stages}
    return build_schedule(args.schedule, args.ranks, args.microbatches, **options, **knob_options(args))


# --- commands -------------------------------------------------------------------------


def _summary_lines(schedule: Schedule, metrics: Metrics, show_bytes: bool) -> list[str]:
    """Headline numbers; bytes only when the costs carry real sizes (a cost file), not the 1-per-microbatch default."""
    lines = [
        schedule.describe(),
        *filter(None, [dialect_note(schedule)]),  # a file in torch's older dialect says so, in one line
        f"makespan {metrics.makespan:.3f} ms, bubble_fraction {metrics.bubble_fraction:.1%} "
        f"(idle/busy {metrics.bubble_ratio:.3f})",
    ]
    moves = any(rank.copy_busy_ms or rank.peak_host_bytes for rank in metrics.ranks)
    for rank in metrics.ranks:
        memory = format_memory(rank.peak_activation_bytes, rank.peak_activations, show_bytes)
        stashed = f" ({format_memory(None, rank.peak_activations, False)} stashed)" if show_bytes else " stashed"
        if schedule.seq_chunks > 1:  # what is stashed is sequence chunks, each 1/S of a microbatch
            chunks = rank.peak_activations
            whole = chunks / schedule.seq_chunks
            counted = f"{chunks} sequence chunks ({whole:g} microbatch{'' if whole == 1 else 'es'})"
            memory, stashed = (memory, f" ({counted} stashed)") if show_bytes else (counted, " stashed")
        host = f"; host {format_bytes(rank.peak_host_bytes)}" if moves and show_bytes else ""
        host += f"; copy engine busy {rank.copy_busy_ms:.3f} ms" if moves else ""
        lines.append(f"  rank {rank.rank}: bubble {rank.bubble_fraction:.1%}, peak memory {memory}{stashed}{host}")
    return lines


def _with_step_costs(cost: CostModel, args: argparse.Namespace, num_ranks: int) -> CostModel:
    """--overhead, --dispatch and --shared-cores replace what the cost model (or cost file) says."""
    changes: dict = {}
    for flag, field in (("overhead", "step_overhead_ms"), ("dispatch", "dispatch_ms")):
        values = getattr(args, flag)
        if values is None:
            continue
        if len(values) not in (1, num_ranks):
            raise UsageError(f"--{flag} has {len(values)} values for {num_ranks} ranks: give 1 or {num_ranks}")
        changes[field] = tuple(values)
    if args.shared_cores is not None:
        changes["shared_cores"] = args.shared_cores
    return replace(cost, runtime=replace(cost.runtime, **changes)) if changes else cost


def _steps_lines(schedule: Schedule, step: SimulatedStep, cost: CostModel, args: argparse.Namespace) -> list[str]:
    """The step time as a training loop sees it (overhead included), and over --steps N steps in a row."""
    import statistics

    from pipesim.sim.steps import simulate_steps

    lines = [f"step time {step.step_ms:.3f} ms (actions, dispatch gaps and the last rank's overhead)"]
    reductions = [c for c in step.timeline.comm if c.kind == ALLREDUCE]
    if reductions:
        overhead = cost.overhead_ms(schedule.num_ranks)
        lines.append(
            f"data parallel x{cost.data_parallel}: {len(reductions)} stage all-reduces, "
            f"{sum(c.end - c.start for c in reductions):.3f} ms in all; not hidden by the backward: "
            + ", ".join(f"rank {r} {t - o:.3f} ms" for r, (t, o) in enumerate(zip(step.tail_ms, overhead, strict=True)))
        )
    if args.steps > 1:
        several = simulate_steps(schedule, cost, args.steps, barrier=not args.no_barrier).meta
        times = several["step_times_ms"]
        between = "no barrier: ranks run into the next step" if args.no_barrier else "a barrier opens every step"
        lines.append(
            f"{args.steps} steps ({between}): {several['total_ms']:.3f} ms in all, "
            f"steady step {statistics.median(times[1:]):.3f} ms"
        )
    return lines


@paused_gc()  # 10^5 actions, spans and texts, none in a cycle: the collector's rescans cost 15-20% of the command
def cmd_simulate(args: argparse.Namespace) -> int:
    check_outputs(args, ("json", "csv", "trace"))
    schedule = schedule_from_args(args)
    cost = _with_step_costs(cost_from_args(args), args, schedule.num_ranks)
    cost = cost.for_schedule(schedule)  # per-rank costs cut per chunk, as compare's; bytes per sequence chunk
    sampling = sampling_from_args(args)
    if sampling is None and args.cost is not None:  # a run's cost file keeps the spread its in-situ steps measured
        from pipesim.sim.spread import cost_spread

        measured = cost_spread(cost)
        sampling = None if measured is None else (measured, args.samples, args.seed)
    perturbation = whatif.perturbation_from_args(args, schedule.num_ranks)
    if args.sequential_pairs:
        schedule = back_to_back(schedule)
    validate(schedule)  # first: a sound schedule keeps its mark through the offload's placement
    schedule = with_offload(schedule, args.offload, cost)  # selective weighs each wait against these costs
    validate(schedule)
    cost = perturbation.apply(cost, schedule.stage_to_rank)  # last: a slow rank, a slow link (pipesim.cost.perturb)
    step = simulate_step(schedule, cost)  # where the gradient reduction is charged: pipesim.sim.data_parallel
    timeline = step.timeline
    metrics = with_link_busy(compute_metrics(timeline, cost), link_busy_ms(schedule, cost))
    lines = _summary_lines(schedule, metrics, show_bytes=args.cost is not None)
    interval = None
    if sampling is not None:
        from pipesim.sim.jitter import step_interval

        interval = step_interval(schedule, cost, *sampling)
        lines.append(
            f"sampled step: {interval.step_ms:.3f} ms, 90% interval {interval.p05_ms:.3f}..{interval.p95_ms:.3f} ms "
            f"(median of {interval.samples} draws, "
            + (f"CV {args.jitter:g}; " if args.jitter is not None else "the cost file's measured spread; ")
            + f"{interval.step_ms / interval.deterministic_ms - 1:+.1%} on the step of the medians, "
            f"{interval.deterministic_ms:.3f} ms)"
        )
    if (
        args.steps > 1
        or any(cost.overhead_ms(schedule.num_ranks))
        or any(cost.dispatch_per_rank(schedule.num_ranks))
        or cost.data_parallel > 1
    ):
        lines += _steps_lines(schedule, step, cost, args)  # every refusal comes before any file is written
    forget_lowering(schedule)  # the files are written from the timeline: its peak memory need not hold the lowering
    written = _write_simulation_files(args, schedule, cost, step, metrics, interval)
    # after the files (a closed stdout loses none); on stderr when an output went to stdout (`-`)
    print("\n".join(lines + written_lines(*written)), file=summary_stream(*written))
    return 0


def _write_simulation_files(
    args: argparse.Namespace,
    schedule: Schedule,
    cost: CostModel,
    step: SimulatedStep,
    metrics: Metrics,
    interval: StepInterval | None = None,
) -> list[str]:
    timeline = step.timeline
    files: dict[Path, str] = {}  # written together, all or none (pipesim.io.atomic.write_files)
    if args.json is not None:
        summary = {
            **metrics.to_dict(),
            "step_ms": step.step_ms,
            **({} if interval is None else interval.to_dict()),
            "schedule": schedule_to_dict(schedule, texts := schedule.text_rows()),
            "cost": cost_to_dict(cost),
        }
        files[args.json] = timeline_text(timeline, args.json, summary, span_texts(timeline, schedule, texts))
    if args.csv is not None:
        files[args.csv] = schedule_to_csv(schedule, args.csv_format)  # CSV whatever the file's suffix
    if args.trace is not None:
        # with a flow arrow per message between ranks
        from pipesim.io.chrome_trace import timeline_to_chrome_trace

        files[args.trace] = json_text(timeline_to_chrome_trace(timeline, schedule), args.trace)
    write_files(files)
    written = [str(path) for path in files]
    written += write_figures(lambda: _gantt(timeline, schedule.name), args)
    return written


def _gantt(timeline: Timeline, title: str):  # noqa: ANN202 - a plotly figure (plotly only when one is asked for)
    from pipesim.charts.gantt import gantt_figure

    return gantt_figure(timeline, title=title)


# Every other command's module, imported only when its command runs or the full parser is built: `simulate` starts
# without the planner's, the synthesizer's or the trace reader's modules (each module's COMMANDS runs its commands)
COMMAND_MODULES = MappingProxyType(
    {
        "compare": "pipesim.cli.compare",
        "import-trace": "pipesim.cli.trace",
        "balance": "pipesim.cli.plan",
        "plan": "pipesim.cli.plan",
        "synthesize": "pipesim.cli.synthesize",
        "stragglers": "pipesim.cli.stragglers",
        "app": "pipesim.cli.app",
    }
)
COMMANDS = ("list", "simulate", *COMMAND_MODULES)


def run_command(args: argparse.Namespace) -> int:
    """The parsed command run by its own function (its module imported now)."""
    if args.command == "list":
        return cmd_list(args)
    if args.command == "simulate":
        return cmd_simulate(args)
    return importlib.import_module(COMMAND_MODULES[args.command]).COMMANDS[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, build, run; every way it ends is an exit status and at most one line on stderr (pipesim.flags:
    2 a usage error, 1 a deadlocked schedule, an unwritable output or an image that cannot be rendered)."""

    def command() -> int:
        arguments = list(sys.argv[1:] if argv is None else argv)
        only = arguments[0] if arguments and arguments[0] in COMMANDS else None  # a run's own command's flags
        args = build_parser(only).parse_args(arguments)
        return run_command(args)

    return run_main(programs().pipesim, command, failures=(DeadlockError, UnwritableOutput, ExportUnavailable))
