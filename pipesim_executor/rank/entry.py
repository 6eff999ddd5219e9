"""What every torchrun entry point of the rank side does with its command line: take the folder it works in,
run, and turn an exception into an `error` event and a non-zero status (torchrun then ends the other ranks)."""

from __future__ import annotations

import argparse
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from pipesim_executor.progress import emit
from pipesim_executor.rank.transport import env_int


def rank_main(
    run: Callable[[Path], object], prog: str, description: str, run_dir_help: str, argv: Sequence[str] | None
) -> int:
    """Parse `--run-dir` and `--launch-node`, call `run(run_dir)`; 0, or 1 after reporting what went wrong."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--run-dir", required=True, type=Path, help=run_dir_help)
    parser.add_argument("--launch-node", type=int, default=0, help="this node's rank (names the launch's processes)")
    args = parser.parse_args(argv)
    try:
        run(args.run_dir)
    except Exception as error:  # report, then fail this rank; torchrun ends the others
        emit("error", rank=env_int("RANK", 0), message=f"{type(error).__name__}: {error}")
        traceback.print_exc()
        return 1
    return 0
