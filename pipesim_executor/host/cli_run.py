"""`python -m executor run`: its flags, generated from the run's configs (pipesim_executor.config; each field's
docstring is
its help), the config they describe, and the run itself: its progress, then a summary.

Progress (`EventOutput`, shared with `profile`): on a terminal, a bar on stderr; the launcher's events as JSON
lines on stdout with `--events`, or whenever stdout is not a terminal (a pipe, a file: a program reads them).

One timed job at a time per machine (pipesim_executor.host.machine): while another `run`, `profile` or
`verify-plan` times, a run is refused with one line naming it (exit 1), or with `--wait` waits for it to end.

Exit status: 0 the run ended ok, or partial (it went well; a part asked for, the torch reference, did not run:
the summary says why); 1 it failed, timed out or was refused (a deadlocked schedule, a run folder that cannot be
written, another timed job holding the machine); 2 a usage error (one line on stderr; nothing was started);
130 / 143 interrupted by Ctrl-C / SIGTERM (every process of the run ended, result.json says cancelled).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
import time
from pathlib import Path

from pipesim.cost.shape import TransformerShape
from pipesim.flags import UsageError, add_flags, folder_flag, from_flags, given, given_flags
from pipesim.io.formats import dialect_note, load_schedule
from pipesim.ir import Schedule
from pipesim.programs import named_as_started
from pipesim.progress_bar import ProgressBar, on_terminal
from pipesim_executor.config import (
    CUSTOM,
    MODEL_KINDS,
    SPEC_HELP,
    CNNConfig,
    ComputeConfig,
    DeviceConfig,
    InjectConfig,
    ModelConfig,
    MoEConfig,
    NodesConfig,
    PipelineConfig,
    RunConfig,
    TrainingConfig,
    absolute_spec,
)
from pipesim_executor.host.cli_runs import add_wait_flag, say_waiting, summary_lines
from pipesim_executor.host.time_left import TimeLeft
from pipesim_executor.progress import readable_event
from pipesim_executor.seq_cut import data_microbatches

SECTION = "run"  # the argparse dests of the generated flags: run.pipeline.num_ranks, run.model.transformer.num_layers
OK_STATUSES = ("ok", "partial")
INTERRUPTED, TERMINATED = 130, 143


def model_choice(text: str) -> str:
    """A built-in model's name, or a spec with a model file's path made absolute (the ranks start elsewhere)."""
    if text in MODEL_KINDS:
        return text
    if ":" in text:
        try:
            return absolute_spec(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    raise argparse.ArgumentTypeError(f"unknown model {text!r}; valid: {', '.join(MODEL_KINDS)} or {SPEC_HELP}")


def add_arguments(run: argparse.ArgumentParser) -> None:
    """Every field of RunConfig is a flag (pipesim.flags); the model's kind, a custom schedule file and where the
    run folder goes are added by hand."""
    groups = add_flags(run, RunConfig, SECTION)
    groups[f"{SECTION}.pipeline"].add_argument(
        "--schedule-file",
        type=Path,
        metavar="FILE",
        help="a custom schedule instead of --schedule: pipesim JSON or torch's CSV (it sets ranks and microbatches)",
    )
    groups[f"{SECTION}.model"].add_argument(
        "--split-from",
        type=Path,
        metavar="FILE",
        help=named_as_started(
            "cut the model where the planner would: a plan (python -m pipesim plan --json: its best candidate for "
            "this run) or a unit profile (python -m executor profile: balanced over F+B at the run's microbatch "
            "size); default: the planner's cut of the built-in Transformer, the CNN's and a custom model's layers "
            "by parameter count"
        ),
    )
    groups[f"{SECTION}.model"].add_argument(
        "--model",
        type=model_choice,
        default="transformer",
        metavar="MODEL",
        help=f"{' or '.join(MODEL_KINDS)} (sized by the flags below), or your own: {SPEC_HELP} "
        "(pipesim_executor/custom_model.py says what it returns) (default transformer)",
    )
    groups[SECTION].add_argument(
        "--out", type=Path, metavar="DIR", help="the run folder, e.g. runs/NAME (default: a new one under --runs-root)"
    )
    add_events_flag(groups[SECTION])
    add_wait_flag(groups[SECTION])
    groups[SECTION].add_argument(
        "--runs-root",
        type=folder_flag,
        default=Path("runs"),
        metavar="DIR",
        help="where run folders without --out are made (default runs)",
    )


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig the flags describe; ValueError (the configs' own checks) or UsageError on bad values."""
    sizes = {
        "transformer": given_flags(args, TransformerShape, f"{SECTION}.model.transformer"),
        "cnn": given_flags(args, CNNConfig, f"{SECTION}.model.cnn"),
        "moe": given_flags(args, MoEConfig, f"{SECTION}.model.moe"),
    }
    kind = args.model if args.model in MODEL_KINDS else CUSTOM
    for sized, flags in sizes.items():
        if flags and sized != kind and not (kind == "moe" and sized == "transformer"):
            model = args.model if kind == CUSTOM else f"the {kind}"
            raise UsageError(f"{', '.join(flags)} size the built-in {sized} model; {model} does not take them")
    base = ModelConfig(kind=kind, spec=args.model if kind == CUSTOM else None)
    sections = {
        "pipeline": from_flags(PipelineConfig, args, f"{SECTION}.pipeline"),
        "model": from_flags(ModelConfig, args, f"{SECTION}.model", base),
        "training": from_flags(TrainingConfig, args, f"{SECTION}.training"),
        "devices": from_flags(DeviceConfig, args, f"{SECTION}.devices"),
        "nodes": from_flags(NodesConfig, args, f"{SECTION}.nodes"),
        "compute": from_flags(ComputeConfig, args, f"{SECTION}.compute"),
        "inject": from_flags(InjectConfig, args, f"{SECTION}.inject"),
    }
    return RunConfig(**sections, **given(args, SECTION))


def cmd_run(args: argparse.Namespace) -> int:
    from pipesim_executor.host import launch

    config = config_from_args(args)
    schedule = None if args.schedule_file is None else load_schedule(args.schedule_file)
    if schedule is not None and (note := dialect_note(schedule)):
        print(note, flush=True)  # a file in torch's older dialect says so, once
    if schedule is not None:  # the file says what runs: its name, ranks and microbatches
        pipeline = PipelineConfig(
            schedule.name,
            schedule.num_ranks,
            data_microbatches(schedule),  # DualPipe's in both directions, each of a sequence's chunks once
            data_parallel=config.pipeline.data_parallel,
        )
        training = config.training
        if "run.training.batch_size" not in vars(args):  # the default batch for the file's microbatches
            training = dataclasses.replace(training, batch_size=None)
        config = dataclasses.replace(config, pipeline=pipeline, training=training)
    if args.split_from is not None:
        config = _split_from(args.split_from, config, schedule)
    runs_root, name = (args.out.parent, args.out.name) if args.out else (args.runs_root, None)
    output = EventOutput("run", args.events)
    handle = launch.start_run(
        config, runs_root=runs_root, name=name, schedule=schedule, on_event=output,
        wait_for_machine=args.wait_for_machine, on_wait=say_waiting,
    )  # fmt: skip
    output.follow(handle)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)  # SIGTERM ends the run as Ctrl-C does
    try:
        result = handle.wait()
    except (KeyboardInterrupt, Terminated) as stop:
        output.close()
        handle.cancel()  # returns once every process of the run is gone and result.json says cancelled
        print("interrupted: every process of the run was ended (result.json: cancelled)", file=sys.stderr)
        return TERMINATED if isinstance(stop, Terminated) else INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
        output.close()
    print("\n".join(summary_lines(result)), flush=True)
    return 0 if result.status in OK_STATUSES else 1


def _split_from(path: Path, config: RunConfig, schedule: Schedule | None) -> RunConfig:
    """The config with the planner's split read off `path` (pipesim_executor.host.split_from)."""
    from pipesim.schedules import schedule_info
    from pipesim_executor.host.split_from import split_from_file

    if config.model.split_points is not None:
        raise UsageError("--split-points and --split-from both say where stages start: give one")
    pipeline = config.pipeline
    if schedule is not None:
        stages = schedule.num_stages
    else:
        stages = pipeline.num_ranks * schedule_info(pipeline.schedule).chunks_per_rank(pipeline.num_virtual_stages)
    split = split_from_file(path, config, stages)
    return dataclasses.replace(config, model=dataclasses.replace(config.model, split_points=split))


class Terminated(BaseException):
    """SIGTERM arrived while a run was in progress (a BaseException, like KeyboardInterrupt)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def add_events_flag(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--events",
        action="store_true",
        help="print the launcher's progress events as JSON lines on stdout (default: only when stdout is not a "
        "terminal; on a terminal a progress bar on stderr shows them)",
    )


REDRAW_S = 1.0  # a launch's bar redraws at least this often: progress comes in steps minutes apart


class EventOutput:
    """A launch's progress on the command line: each event as a JSON line on stdout when asked (`--events`) or
    when stdout is not a terminal (a program reads it), and a progress bar on stderr when that is a terminal,
    drawn once the launch has started (a usage error comes first, alone) and redrawn every `REDRAW_S` with the
    time left (pipesim_executor.host.time_left) between events."""

    def __init__(self, what: str, events: bool, enabled: bool | None = None) -> None:
        self.print_events = events or not on_terminal(sys.stdout)
        self._what, self._enabled = what, enabled
        self.bar: ProgressBar | None = None
        self._handle: object | None = None  # the launch's handle, whose `progress` (0 to 1) moves the bar
        self._note = ""
        self._left: TimeLeft | None = None
        self._left_s: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def follow(self, handle: object) -> None:
        """Draw the bar for this started launch and tick it."""
        self._handle = handle
        self.bar = ProgressBar(self._what, self._enabled)
        self._left = TimeLeft(time.monotonic())
        if self.bar.shown:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_S):
            self._redraw(estimate=True)

    def _redraw(self, estimate: bool) -> None:
        progress = getattr(self._handle, "progress", None)
        if self.bar is None or self._left is None or not isinstance(progress, (int, float)):
            return
        with self._lock:
            if estimate:  # only the ticker moves the estimate: a burst of events is one redraw's worth
                self._left_s = self._left.estimate(time.monotonic(), progress)
            self.bar.set(progress, self._note, self._left_s)

    def __call__(self, event: dict) -> None:
        if self.print_events:
            print_event(event)
        self._note = readable_event(event)
        self._redraw(estimate=False)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()
        if self.bar is not None:
            self.bar.close()


def print_event(event: dict) -> None:
    """One progress event as one JSON line, in one write: events come from the launcher's threads, and a line must
    never be split by another (print writes the text and its newline separately)."""
    sys.stdout.write(json.dumps(event, default=str) + "\n")
    sys.stdout.flush()
