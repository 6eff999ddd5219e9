"""Every module the code, its docstrings, its help texts and its documents name exists.

Modules move (a package split once renamed most of them) and prose does not follow by itself: this
finds each dotted name (`pipesim.sim.steps`), each `-m` module and each checkout path (`pipesim/cli/plan.py`)
in every tracked .py and .md file and in every command's `--help`, and checks that it resolves.
"""

from __future__ import annotations

import contextlib
import io
import subprocess

import pytest

from tests.helpers.module_refs import ROOT, short_unresolved, unresolved

# Named on purpose though absent: the design's worked example of a new family (a module a contributor would
# write), and a test that asks pipesim for a name it does not have.
HYPOTHETICAL = {
    "pipesim.schedules.reversed_gpipe",
    "pipesim/schedules/reversed_gpipe.py",
    "pipesim.simulate_everything",
}


def _tracked(*patterns: str) -> list[str]:
    listed = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=False)
    if listed.returncode == 0 and listed.stdout.strip():
        return listed.stdout.split()
    return sorted(  # no git (an unpacked source tree): the files themselves
        str(p.relative_to(ROOT)) for pattern in patterns for p in ROOT.rglob(pattern) if ".venv" not in p.parts
    )


def test_every_module_named_in_the_code_and_the_documents_exists():
    stale = []
    for name in _tracked("*.py", "*.md"):
        if name == "tests/test_module_references.py":  # its own examples of stale names
            continue
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        stale += [f"{name}:{line}: {ref} ({kind})" for line, kind, ref in unresolved(text) if ref not in HYPOTHETICAL]
    assert not stale, "stale module references:\n" + "\n".join(stale)


def _help_texts(parser) -> list[tuple[str, str]]:
    """(command, help text) of a parser and every subcommand under it."""
    import argparse

    texts = [(parser.prog, parser.format_help())]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts += _help_texts(sub)
    return texts


@pytest.mark.parametrize("cli", ["pipesim", "executor"])
def test_every_module_named_in_the_help_exists(cli):
    if cli == "pipesim":
        from pipesim.cli.main import build_parser
    else:
        pytest.importorskip("torch")
        from pipesim_executor.host.cli import build_parser
    with contextlib.redirect_stdout(io.StringIO()):
        texts = _help_texts(build_parser())
    assert len(texts) > 3
    stale = [f"{command}: {ref} ({kind})" for command, text in texts for _, kind, ref in unresolved(text)]
    assert not stale, "stale module references in --help:\n" + "\n".join(stale)


def test_the_finder_sees_stale_names():
    """The check can fail: the names the issue found stale are reported."""
    text = "see pipesim.steady_state and pipesim.lower.comm_plan; -m pipesim_executor.worker; pipesim/cli_plan.py"
    assert [ref for _, _, ref in unresolved(text)] == [
        "pipesim.steady_state",
        "pipesim.lower.comm_plan",
        "pipesim_executor.worker",
        "pipesim_executor.worker",
        "pipesim/cli_plan.py",
    ]
    assert not unresolved("pipesim.sim.steps, pipesim.semantics.lower.comm_plan, -m pipesim_executor.rank.worker")


def test_the_design_map_names_only_what_exists():
    """docs/design.md, the code's map: every full name and path resolves (above, with every document), and so does
    every short one, `Class.member` or a module by its tail, read from the source with ast (nothing imported)."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    stale = [f"docs/design.md:{n}: {ref} ({kind})" for n, kind, ref in unresolved(text) if ref not in HYPOTHETICAL]
    stale += [f"docs/design.md:{line}: {ref}" for line, ref in short_unresolved(text)]
    assert not stale, "the design map names what does not exist:\n" + "\n".join(stale)


def test_the_short_name_finder_sees_stale_names():
    text = (
        "`lod.MAX_EXACT_BARS`, `charts.gantt.MAX_EXACT_BARS`, `UnitProfile.spread`, `UnitProfile.spreads`, "
        "`ModelDescription.num_layers`, `lower.crossing_stage()`, `st.cache_data`, `cost.json`"
    )
    assert [ref for _, ref in short_unresolved(text)] == ["lod.MAX_EXACT_BARS", "UnitProfile.spreads"]
