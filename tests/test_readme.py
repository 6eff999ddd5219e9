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
