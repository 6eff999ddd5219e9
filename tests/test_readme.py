"""The README's facts that can drift from the code: every image it shows exists, the dependency lists
it gives are pyproject.toml's, and requirements.txt holds the exact versions it says it holds."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip())[0].lower()


def _listed(text: str) -> set[str]:
    """`a`, `b` and `c` / a, b and c -> {a, b, c} (parenthetical remarks dropped)."""
    text = " ".join(re.sub(r"\([^)]*\)", "", text).replace("`", "").split())
    return {part.strip().lower() for part in re.split(r",| and ", text) if part.strip()}


def test_every_image_the_readme_shows_exists() -> None:
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", README) + re.findall(r'<img[^>]+src="([^"]+)"', README)
    assert len(images) >= 5
    missing = [path for path in images if not path.startswith("http") and not (ROOT / path).is_file()]
    assert not missing, f"README.md shows images that do not exist: {missing}"


def test_the_readmes_dependency_lists_are_pyprojects() -> None:
    """Catches a core dependency the README does not name (highspy was one) or an extra it describes wrongly."""
    core = re.search(r"The core \(`pip install \.`\) needs (.*?) only:", README, re.S)
    assert core, "README.md: no sentence 'The core (`pip install .`) needs ... only:'"
    assert _listed(core.group(1)) == {_name(r) for r in PROJECT["dependencies"]}
    extras = dict(re.findall(r"`(\w+)` adds\s+([a-z,\s]+?)[;.]", README))
    declared = {extra: {_name(r) for r in reqs} for extra, reqs in PROJECT["optional-dependencies"].items()}
    assert {extra: _listed(names) for extra, names in extras.items()} == declared


def test_requirements_txt_holds_exact_versions() -> None:
    """The README says requirements.txt keeps the exact versions CI tests with: every line is a pin, and it names
    every dependency pyproject.toml declares (the core's and every extra's)."""
    assert "`requirements.txt` keeps the exact versions" in README
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    pins = [line for line in lines if line]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", pin) for pin in pins), pins
    declared = {_name(r) for r in PROJECT["dependencies"]}
    declared |= {_name(r) for reqs in PROJECT["optional-dependencies"].values() for r in reqs}
    assert declared <= {_name(pin) for pin in pins}


def _readme_outputs():
    """scripts/readme_outputs.py, imported by its path (scripts/ is no package)."""
    import importlib.util
    import sys

    if "readme_outputs" not in sys.modules:
        spec = importlib.util.spec_from_file_location("readme_outputs", ROOT / "scripts" / "readme_outputs.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["readme_outputs"] = module  # before running it: its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["readme_outputs"]


def test_the_readme_shows_what_the_code_prints():
    """Catches a figure that drifted (the `--jitter 0.2` example showed gpipe at 63.067 where the code printed
    61.842): `python scripts/readme_outputs.py` writes them again."""
    drifts = _readme_outputs().drifts(README)
    assert not drifts, "README.md drifted from the code (python scripts/readme_outputs.py rewrites it):\n" + "\n".join(
        drifts
    )


def test_the_drift_check_sees_a_changed_figure():
    outputs = _readme_outputs()
    changed = README.replace(
        "# gpipe                    57.000     61.842", "# gpipe                    57.000     63.067"
    )
    assert changed != README and any(line.startswith("jitter:") for line in outputs.drifts(changed))
    assert outputs.regenerate(changed) == README


def test_every_output_block_is_generated_or_one_runs_example():
    """An output block (a fence with no language) is one run's real timings, marked as such; every `# ` line with a
    figure in ms beside a command is one the script writes."""
    outputs = _readme_outputs()
    lines = README.splitlines()
    inside, language = False, ""
    for index, line in enumerate(lines):
        if line.startswith("```"):
            inside, language = not inside, line[3:].strip()
            if inside and not language:
                assert lines[index - 1] == outputs.EXAMPLE_MARK, f"README.md:{index + 1}: an output block unmarked"
    covered = set()
    for output in outputs.OUTPUTS:
        if isinstance(output, outputs.Commented):
            covered.update(range(*output.span(lines)))
    inside = False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            inside = not inside
        elif inside and line.startswith("# ") and re.search(r"\d ms\b|makespan", line):
            assert index in covered, f"README.md:{index + 1}: an output no script writes: {line}"


def test_requirements_dev_says_the_workers_test_sh_runs():
    workers = re.search(r"-n (\d+) --dist", (ROOT / "scripts" / "test.sh").read_text())
    comment = re.search(r"runs the suite in (\w+) workers \(-n (\d+)", (ROOT / "requirements-dev.txt").read_text())
    assert workers and comment and comment.group(2) == workers.group(1)
    assert comment.group(1) == {"2": "two", "3": "three", "4": "four"}.get(workers.group(1))
