"""`python -m executor profile`: time a model unit by unit on this machine, for the planner.

    python -m executor profile --model transformer --layers 4 --hidden 128 --microbatch-sizes 1,2,4 --out out/prof
    python -m executor profile --model pipesim_examples.gpt_small:build --microbatch-sizes 1,2 --out out/gpt-prof
    python -m pipesim plan --cost out/prof/cost.json --devices 2 --global-batch 16 --optimizer sgd --json plan.json

Flags come from the configs (pipesim_executor.host.unit_profile.ProfileConfig, the Transformer's TransformerShape, the
CNN's CNNConfig: each field's docstring is its help). Progress as `run`'s (a bar on a terminal; JSON event lines
with --events or when stdout is not a terminal), then a summary.

A profile is timed: while another job holds the machine it is refused (exit 1), or waits with `--wait` (as
`run`'s, pipesim_executor.host.machine).

Exit status: 0 the profile was written; 1 it failed, timed out, could not be written or was refused; 2 a usage
error (one line on stderr; nothing was started); 130 interrupted (every process ended).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipesim.cost.shape import TransformerShape
from pipesim.flags import UsageError, add_flags, from_flags, given_flags
from pipesim_executor.config import CUSTOM, MODEL_KINDS, OPTIMIZERS, SPEC_HELP, CNNConfig, ModelConfig
from pipesim_executor.host.cli_run import INTERRUPTED, EventOutput, add_events_flag, model_choice
from pipesim_executor.host.cli_runs import add_wait_flag, say_waiting
from pipesim_executor.host.unit_profile import ProfileConfig, start_profile, summary_lines

SECTION = "profile"


def _optimizers(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in OPTIMIZERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown optimizer {(unknown or ['(none)'])[0]!r:.40}; valid: {', '.join(OPTIMIZERS)}"
        )
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    groups = add_flags(parser, ProfileConfig, SECTION)
    groups[SECTION].add_argument(
        "--optimizers",
        type=_optimizers,
        default=OPTIMIZERS,
        metavar="A,B",
        help=f"optimizers whose step to time; a plan may use only these (default {','.join(OPTIMIZERS)})",
    )
    groups[SECTION].add_argument(
        "--model",
        type=model_choice,
        default="transformer",
        metavar="MODEL",
        help=f"{' or '.join(MODEL_KINDS)} (sized by the flags below), or your own: {SPEC_HELP} "
        "(checked in a child process before anything runs) (default transformer)",
    )
    groups[SECTION].add_argument("--out", type=Path, required=True, metavar="DIR", help="a new folder: D/cost.json")
    add_events_flag(groups[SECTION])
    add_wait_flag(groups[SECTION])
    add_flags(parser, TransformerShape, f"{SECTION}.transformer", ModelConfig().transformer)
    add_flags(parser, CNNConfig, f"{SECTION}.cnn")


def config_from_args(args: argparse.Namespace) -> ProfileConfig:
    kind = args.model if args.model in MODEL_KINDS else CUSTOM
    if kind == "moe":  # its experts are placed over a run's replicas, which one process's units cannot say
        raise UsageError(
            "executor profile times one process's units, and the moe model's all-to-alls need its replicas: "
            "profile it in its run, executor run --model moe --data-parallel D --profile"
        )
    sizes = {
        "transformer": given_flags(args, TransformerShape, f"{SECTION}.transformer"),
        "cnn": given_flags(args, CNNConfig, f"{SECTION}.cnn"),
    }
    for sized, flags in sizes.items():
        if flags and sized != kind:
            model = args.model if kind == CUSTOM else f"the {kind}"
            raise UsageError(f"{', '.join(flags)} size the built-in {sized} model; {model} does not take them")
    model = ModelConfig(
        kind=kind,
        spec=args.model if kind == CUSTOM else None,
        transformer=from_flags(TransformerShape, args, f"{SECTION}.transformer", ModelConfig().transformer),
        cnn=from_flags(CNNConfig, args, f"{SECTION}.cnn", CNNConfig()),
    )
    base = ProfileConfig(model=model, optimizers=args.optimizers)
    return from_flags(ProfileConfig, args, SECTION, base)


def cmd_profile(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    output = EventOutput("profile", args.events)
    handle = start_profile(
        config, args.out, on_event=output, wait_for_machine=args.wait_for_machine, on_wait=say_waiting
    )
    output.follow(handle)
    try:
        result = handle.wait()
    except KeyboardInterrupt:
        output.close()
        handle.cancel()
        print("interrupted: every process of the profile was ended", file=sys.stderr)
        return INTERRUPTED
    output.close()
    print("\n".join(summary_lines(result)), flush=True)
    return 0 if result.status == "ok" and result.profile is not None else 1
