"""Rewrite the expected action orders under tests/artifacts/orders/ that tests/test_expected_orders.py compares.

Usage, from the repository root:

    python -m tests.helpers.regen_orders              # every registered family; files no family makes are removed
    python -m tests.helpers.regen_orders v-min zbv    # only these families

One file per family and size, `<family>-p<ranks>-m<microbatches>[-v<chunks>].csv`: the order as torch's CSV
(`pipesim.io.torch_csv.schedule_to_csv`, compute_only; one rank per line, cells separated by commas, overlapped
pairs as torch writes them), so that `torch.distributed.pipelining`'s `_load_csv` and pipesim's both read it.
Read the diff before committing the rewritten files: a changed order is a changed schedule.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from pipesim.io.torch_csv import schedule_to_csv
from pipesim.schedules import schedule_info, schedule_names
from tests.helpers.sizes import build_checked, must_build

ORDERS = Path(__file__).resolve().parent.parent / "artifacts" / "orders"
COMMAND = "python -m tests.helpers.regen_orders"
# Sizes tried in turn; each family keeps the first two it promises (tests/helpers/sizes.py), and a family whose
# caller picks the chunks per rank gets one more at the second size with 3 chunks (the default is 2).
CANDIDATE_SIZES = ((2, 4), (4, 8), (3, 6), (4, 12), (8, 16))
OTHER_CHUNKS = 3


class OrderCase(NamedTuple):
    name: str
    num_ranks: int
    num_microbatches: int
    chunks: int | None  # None: the family's default

    @property
    def path(self) -> Path:
        suffix = "" if self.chunks is None else f"-v{self.chunks}"
        return ORDERS / f"{self.name}-p{self.num_ranks}-m{self.num_microbatches}{suffix}.csv"

    def render(self) -> str:
        """The expected file's text: torch's CSV rows, newline-terminated."""
        options = {} if self.chunks is None else {"chunks": self.chunks}
        schedule = build_checked(self.name, self.num_ranks, self.num_microbatches, **options)
        return "".join(line + "\n" for line in schedule_to_csv(schedule, "compute_only").splitlines())


def cases(name: str) -> list[OrderCase]:
    """The sizes family `name` has expected orders at."""
    promised = [(p, m) for p, m in CANDIDATE_SIZES if must_build(name, p, m)][:2]
    found = [OrderCase(name, p, m, None) for p, m in promised]
    if promised and schedule_info(name).takes_chunks:
        found.append(OrderCase(name, *promised[-1], OTHER_CHUNKS))
    return found


def all_cases() -> list[OrderCase]:
    return [case for name in schedule_names() for case in cases(name)]


def regenerate(names: list[str]) -> list[Path]:
    """Write the files of `names` (every family when empty, removing files no family makes); the paths written."""
    ORDERS.mkdir(parents=True, exist_ok=True)
    chosen = [case for name in names for case in cases(schedule_info(name).name)] if names else all_cases()
    written = []
    for case in chosen:
        case.path.write_text(case.render())
        written.append(case.path)
    if not names:
        for stale in set(ORDERS.glob("*.csv")) - set(written):
            stale.unlink()
    return written


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    try:
        written = regenerate(names)
    except ValueError as error:  # an unknown family name: the registry's one line with the valid ones
        print(f"regen_orders: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files under {ORDERS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
