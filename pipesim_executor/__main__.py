"""`python -m executor run|list|show ...` (and the installed `pipesim-run`): see pipesim_executor/host/cli.py for usage.

`pipesim-run` is installed with the core `pipesim`, torch only with the `run` extra: the commands that start
processes say so in one line rather than fail deep inside torchrun; `list`, `show` and `cancel` read run
folders and work without torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pipesim.programs import programs
from pipesim_executor.devices import torch_missing

# The commands that import torch (in this process or in the ranks they start).
NEEDS_TORCH = ("run", "verify-plan", "doctor")
USAGE_ERROR = 2


def missing_torch(argv: Sequence[str]) -> str | None:
    """Why the command cannot run here (it needs torch, which is not installed), or None."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    missing = torch_missing() if command in NEEDS_TORCH else None
    return None if missing is None else f"{command} needs torch, and {missing}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the executor's command line, after checking that the command has what it needs."""
    args = list(sys.argv[1:] if argv is None else argv)
    problem = missing_torch(args)
    if problem is not None:
        print(f"{programs().executor}: error: {problem}", file=sys.stderr)  # the form pipesim.flags.run_main prints
        return USAGE_ERROR
    from pipesim_executor.host.cli import main as cli_main  # after the check: its imports are the executor's own

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
