"""How often one command enters the lowering (`pipesim/semantics/lower.py`) and the IR (`pipesim/ir.py`) from
other modules: each distinct (function, calling module) pair once, with its number of calls.

Usage:
    python bench/count_lowering.py simulate --schedule 1f1b --ranks 4 --microbatches 8 --json /tmp/o.json

A schedule is lowered once (`pipesim.semantics.dag.dependencies`, kept on the schedule); what else enters
lower.py should be the rules themselves applied to a timeline (memory, messages), not a second lowering.
Constructors, dunders and module imports are left out.
"""

from __future__ import annotations

import collections
import contextlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipesim.cli.main import main  # noqa: E402

TARGETS = ("pipesim/semantics/lower.py", "pipesim/ir.py")


def count(argv: list[str]) -> collections.Counter:
    calls: collections.Counter = collections.Counter()

    def on_call(frame, event, _arg):
        if event != "call":
            return
        name = frame.f_code.co_name
        if name.startswith(("<", "__")):
            return
        here = frame.f_code.co_filename
        for target in TARGETS:
            if here.endswith(target):
                caller = frame.f_back.f_code.co_filename if frame.f_back else "?"
                if not caller.endswith(target):
                    calls[target, name, caller.split(str(ROOT) + "/")[-1]] += 1

    sys.setprofile(on_call)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main(argv)
    finally:
        sys.setprofile(None)
    return calls


if __name__ == "__main__":
    calls = count(sys.argv[1:])
    for target in TARGETS:
        entries = sorted((k, n) for k, n in calls.items() if k[0] == target)
        print(f"{target}: {len(entries)} entry points, {sum(n for _, n in entries)} calls")
        for (_, name, caller), n in entries:
            print(f"  {n:6d}  {name}  from {caller}")
