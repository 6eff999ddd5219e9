"""Command line of the executor: run a schedule for real, list earlier runs, show one, cancel one, verify a plan.

Usage:
    python -m executor run --schedule 1f1b --ranks 2 --microbatches 8 --model transformer|cnn|package.module:factory \\
        [--layers 4 --d-model 128 --heads 4 --ffn 512 --seq-len 64 --vocab 1000 | --cnn-channels 32 ...] \\
        [--batch-size B] [--steps 5] [--warmup-steps 1] [--virtual-stages V] [--recompute] \\
        [--data-parallel D] [--dtype fp32|bf16] \\
        [--device auto|cpu|cuda] [--backend auto|gloo|nccl|staged] [--profile] [--reference] [--timeout S] \\
        [--torch-profile] \\
        [--nnodes N --node-rank K --rdzv-endpoint HOST:PORT] [--schedule-file custom.csv] [--out runs/NAME]
    python -m executor list [--runs-root runs]
    python -m executor show runs/NAME [--json]
    python -m executor cancel runs/NAME [--timeout S]   (a run of any process: its launcher stops it calmly)
    python -m executor profile --model transformer|cnn|package.module:factory --microbatch-sizes 1,2 --out D
        (pipesim_executor/host/unit_profile.py: the model timed unit by unit, D/cost.json for pipesim plan --cost)
    python -m executor verify-plan plan.json --top 3 [--steps 30] [--device cpu] [--json OUT]
        (pipesim_executor/host/verify.py)
    python -m executor doctor [--device auto|cpu|cuda] [--out D]   (pipesim_executor/host/doctor.py: does this
        machine work?)

`run`'s flags are generated from the run's configs (pipesim_executor/config.py: each field's docstring is its help;
`python -m executor run --help` lists them by concern). `run` and `profile` show a progress bar on stderr where it is
a terminal and print the launcher's progress events as JSON lines on stdout with `--events` or where stdout is not
a terminal (a pipe, a file), then a human summary. Installed, the program is `pipesim-run`; help and errors name
it as it was started (pipesim.programs). Exit statuses (each command's `--help` says its own): 0 done (`run`:
status ok or partial); 1 the run failed, timed out or was refused, or an output could not be written; 2 a usage
error (one line on stderr; nothing was started); 130 / 143 interrupted.
Multi-node: run the same command on every node with its own --node-rank and
the same --out name (it is the rendezvous id); rank 0's node gets measured.json.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import NamedTuple

from pipesim.flags import Parser, run_main
from pipesim.io.formats import UnwritableOutput
from pipesim.programs import programs
from pipesim.semantics.dag import DeadlockError
from pipesim_executor.host import cli_profile, cli_run, cli_runs, doctor
from pipesim_executor.run_files import RESULT_FILE


class Command(NamedTuple):
    """One subcommand: its help, its arguments and what it does (a new command is one entry of COMMANDS)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    exit_status: str


COMMANDS = MappingProxyType(
    {
        "run": Command(
            "run a schedule under torchrun",
            cli_run.add_arguments,
            cli_run.cmd_run,
            "Exit status: 0 the run ended ok or partial (a part asked for, the torch reference, did not run: the "
            "summary says why); 1 it failed, timed out or was refused (a deadlocked schedule, a run folder that "
            "cannot be written); 2 a usage error (one line on stderr; nothing was started); 130 / 143 interrupted "
            "by Ctrl-C / SIGTERM (every process ended; result.json says cancelled).",
        ),
        "list": Command(
            "earlier runs, newest first",
            cli_runs.add_list_arguments,
            cli_runs.cmd_list,
            "Exit status: 0 listed (a damaged folder is a row saying why); 2 a usage error.",
        ),
        "show": Command(
            "one run's results",
            cli_runs.add_show_arguments,
            cli_runs.cmd_show,
            f"Exit status: 0 shown; 2 a usage error: no such run, or a folder that is not a run (no readable "
            f"config.json or {RESULT_FILE}).",
        ),
        "cancel": Command(
            "cancel a running run, whoever started it",
            cli_runs.add_cancel_arguments,
            cli_runs.cmd_cancel,
            "Exit status: 0 the run has ended (or was not running); 1 it was still running after the timeout; "
            "2 a usage error, such as no such run.",
        ),
        "verify-plan": Command(
            "run a plan's top K candidates and compare with the prediction",
            cli_runs.add_verify_arguments,
            cli_runs.cmd_verify_plan,
            "Exit status: 0 at least one candidate ran; 1 none did, or another timed job holds the machine (--wait: "
            "wait for it); 2 a usage error (the plan cannot be read); 3 not comparable: the machine's speed changed "
            "during the verification (its rounds moved together).",
        ),
        "profile": Command(
            "time a model unit by unit for the planner (D/cost.json)",
            cli_profile.add_arguments,
            cli_profile.cmd_profile,
            "Exit status: 0 the profile was written; 1 it failed, timed out or could not be written; 2 a usage "
            "error (one line on stderr; nothing was started); 130 interrupted (every process ended).",
        ),
        "doctor": Command(
            "check this machine with a few small runs (GPU or CPU)",
            doctor.add_arguments,
            doctor.main,
            "Exit status: 0 no check failed (a check that cannot run here is skipped and says why); 1 a check "
            "failed (the report says which); 2 a usage error (an --out folder in use).",
        ),
    }
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=programs().executor,
        description="Run pipeline schedules for real under torchrun.",
        epilog="Exit status: 0 done; 1 the run failed or was refused, or an output could not be written; 2 a usage "
        "error (one line on stderr; nothing was started); 130 / 143 interrupted. See each command's --help.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, command in COMMANDS.items():
        sub = commands.add_parser(name, help=command.help, description=command.help, epilog=command.exit_status)
        command.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run; every way it ends is an exit status with at most one line on stderr (pipesim.flags.run_main:
    the one usage-error path of both command lines)."""

    def command() -> int:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command].run(args)

    return run_main(programs().executor, command, failures=(DeadlockError, UnwritableOutput))
