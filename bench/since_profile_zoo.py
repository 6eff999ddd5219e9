"""Offline, from a finished `bench_plan_verify.py` run: how far the machine moved between each model's first
profile and its two verifications (pipesim.analysis.since_profile, as `verify-plan` now reads it), beside the
verifications' own error. Nothing runs.

usage: python bench/since_profile_zoo.py BENCH_OUT/<timestamp>
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim_executor.host.verify import _since_profile  # noqa: E402
from pipesim_executor.host.verify_compare import VerifyRow  # noqa: E402

MODELS = ("cnn", "embed_heavy", "transformer", "mlp_uneven", "tiny_layers")


def main(run: Path) -> None:
    print(f"{'model':12} {'verification':>12} {'runs / in-situ [95% CI]':>28} {'n':>3} {'check bias':>10} "
          f"{'measured / predicted':>21}")  # fmt: skip
    for model in MODELS:
        plan = json.loads((run / f"plan-{model}.json").read_text())
        plan["inputs"]["cost_file"] = str(run / f"profile-{model}-1" / "cost.json")
        for index in (0, 1):
            path = run / f"plan-{model}-verify-{index}.json"
            if not path.is_file():
                continue
            found = json.loads(path.read_text())["candidates"]
            rows = [VerifyRow(c["label"], c["candidate"], c["predicted_ms"], c["measured_ms"]) for c in found]
            done = [r for r in rows if r.measured_ms]
            overall = math.exp(statistics.mean(math.log(r.measured_ms / r.predicted_ms) for r in done))
            notes: list[str] = []
            got = _since_profile(plan, rows, notes)
            if got is None:
                print(f"{model:12} {index + 1:>12} {'(no in-situ steps in this profile)':>28}")
                continue
            print(f"{model:12} {index + 1:>12} {got.ratio:9.3f} [{got.low:.3f}, {got.high:.3f}] "
                  f"{got.configurations:>3} {got.check_bias:>+10.1%} {overall:>21.3f}")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
