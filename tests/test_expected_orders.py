"""Every registered family builds the action order checked in under tests/artifacts/orders/ at each of its sizes.

A changed order fails here with its diff; a family registered without files fails with the command that writes
them (tests/helpers/regen_orders.py). The files are torch's CSV, so each must also read back as its schedule.
"""

from __future__ import annotations

import difflib
import textwrap

import pytest

import pipesim.schedules as registry
import tests.helpers.regen_orders as regen
from pipesim.api import load_torch_csv
from pipesim.schedules import schedule_names
from tests.helpers import sizes
from tests.helpers.regen_orders import COMMAND, all_cases, cases
from tests.helpers.sizes import build_checked


def order_problems(name: str) -> list[str]:
    """What differs between family `name`'s files and its builds, each with the command that rewrites them."""
    found = cases(name)
    if not found:
        return [f"{name}: none of tests/helpers/regen_orders.py's CANDIDATE_SIZES is promised; add one it builds"]
    problems = []
    for case in found:
        where = f"tests/artifacts/orders/{case.path.name}"
        if not case.path.exists():
            problems.append(f"{where} is missing: write it with `{COMMAND} {name}` and commit it")
            continue
        expected, built = case.path.read_text().splitlines(), case.render().splitlines()
        if expected != built:
            diff = "\n".join(difflib.unified_diff(expected, built, f"{where} (checked in)", "built now", lineterm=""))
            problems.append(
                f"{name} no longer builds {where}:\n{diff}\n"
                f"if the new order is meant, rewrite it with `{COMMAND} {name}` and commit the diff"
            )
    return problems


@pytest.mark.parametrize("name", schedule_names())
def test_the_family_builds_its_expected_orders(name):
    problems = order_problems(name)
    assert not problems, "\n\n".join(problems)


def test_no_file_is_left_without_a_family():
    expected = {case.path for case in all_cases()}
    stale = sorted(path.name for path in regen.ORDERS.glob("*") if path not in expected)
    assert not stale, f"files under {regen.ORDERS} that no registered family makes: {stale}; `{COMMAND}` removes them"


@pytest.mark.parametrize("name", schedule_names())
def test_each_file_reads_back_as_its_schedule(name):
    """The files are torch's CSV: pipesim's reader (as torch's `_load_csv`) gives the built order back."""
    for case in cases(name):
        if case.path.exists():  # a missing one fails test_the_family_builds_its_expected_orders
            options = {} if case.chunks is None else {"chunks": case.chunks}
            built = build_checked(case.name, case.num_ranks, case.num_microbatches, **options)
            assert load_torch_csv(case.path).actions == built.actions, case.path.name


MODULE = textwrap.dedent(
    """
    import dataclasses

    from pipesim.schedules import ScheduleInfo
    from pipesim.schedules.basic import gpipe

    def late_gpipe(num_ranks, num_microbatches):
        return dataclasses.replace(gpipe(num_ranks, num_microbatches), name="late-gpipe")

    SCHEDULES = [ScheduleInfo("late-gpipe", late_gpipe, "GPipe again, registered by a test.")]
    """
)


def test_a_new_family_is_asked_for_its_files_then_checked(tmp_path, monkeypatch):
    """A family registered later: the check names the command; the command writes what the check then accepts,
    and a changed order afterwards shows as a diff."""
    (tmp_path / "late_family.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "FAMILY_MODULES", [*registry.FAMILY_MODULES, "late_family"])
    monkeypatch.setitem(sizes.MUST_BUILD, "late-gpipe", sizes.MUST_BUILD["gpipe"])
    monkeypatch.setattr(regen, "ORDERS", tmp_path / "orders")
    assert "late-gpipe" in schedule_names()
    missing = order_problems("late-gpipe")
    assert len(missing) == 2 and all(f"`{COMMAND} late-gpipe`" in line for line in missing)
    assert regen.main(["late-gpipe"]) == 0
    assert order_problems("late-gpipe") == []
    first = cases("late-gpipe")[0].path
    first.write_text(first.read_text().replace("0F0,0F1", "0F1,0F0", 1))
    (changed,) = order_problems("late-gpipe")
    assert "-0F1,0F0" in changed and "+0F0,0F1" in changed and f"`{COMMAND} late-gpipe`" in changed
