"""The outputs README.md shows, regenerated from the code: every figure it prints beside a command is what that
command prints today.

    python scripts/readme_outputs.py           # rewrite README.md's outputs from the code
    python scripts/readme_outputs.py --check   # exit 1 naming each output that drifted (tests/test_readme.py)

Each output is one of `OUTPUTS`: the README's own command (read from the README, so the command shown is the one
run) and the lines of its output the README keeps, written as `# ` comment lines right after the command; or a
figure in a sentence (`inline`). A block of real timings from one machine (a profile, a verification) cannot be
regenerated: the README marks it with `EXAMPLE_MARK` on the line before its fence, and the test requires every
other output block to be one of these.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLE_MARK = "<!-- one run's example: real timings on one machine, not regenerated (scripts/readme_outputs.py) -->"
PIPESIM = ".venv/bin/python -m pipesim "


def run_pipesim(command: str) -> list[str]:
    """The lines `pipesim` prints for `command` (the README's text after `python -m pipesim`), run in this process
    from an empty folder (its files land there)."""
    from pipesim.cli.main import main

    out = io.StringIO()
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        os.makedirs(os.path.join(folder, "out"))
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(out):
                status = main(shlex.split(command))
        finally:
            os.chdir(here)
    if status != 0:
        raise RuntimeError(f"pipesim {command}: exit status {status}")
    return out.getvalue().splitlines()


@dataclass(frozen=True)
class Commented:
    """A command in a README code block and the lines of its output shown after it, as `# ` lines."""

    name: str
    command: str  # from `python -m pipesim` on, as the README writes it (continuation lines joined)
    keep: Callable[[list[str]], list[str]]

    def expected(self, text: str) -> list[str]:
        return ["# " + line.rstrip() for line in self.keep(run_pipesim(self.command))]

    def span(self, lines: list[str]) -> tuple[int, int]:
        """[start, end) of the output lines after the command's last line."""
        for index, line in enumerate(lines):
            joined, last = line, index
            while joined.endswith("\\") and last + 1 < len(lines):
                last += 1
                joined = joined[:-1].rstrip() + " " + lines[last].strip()
            if joined.startswith(PIPESIM) and joined[len(PIPESIM) :].split("  #")[0].strip() == self.command:
                end = last + 1
                while end < len(lines) and lines[end].startswith("# "):
                    end += 1
                return last + 1, end
        raise LookupError(f"README.md: no command `python -m pipesim {self.command}` ({self.name})")

    def drift(self, text: str) -> str | None:
        lines = text.splitlines()
        start, end = self.span(lines)
        shown, expected = lines[start:end], self.expected(text)
        return None if shown == expected else f"{self.name}: README shows {shown}, the code prints {expected}"

    def write(self, text: str) -> str:
        lines = text.splitlines()
        start, end = self.span(lines)
        return "\n".join([*lines[:start], *self.expected(text), *lines[end:]]) + "\n"


@dataclass(frozen=True)
class Inline:
    """A figure in the README's text: `pattern`'s groups, as `values` computes them."""

    name: str
    pattern: str
    values: Callable[[str], tuple[str, ...]]

    def _match(self, text: str) -> re.Match[str]:
        match = re.search(self.pattern, text)
        if match is None:
            raise LookupError(f"README.md: nothing matches {self.pattern!r} ({self.name})")
        return match

    def drift(self, text: str) -> str | None:
        shown, expected = self._match(text).groups(), self.values(text)
        return None if shown == expected else f"{self.name}: README shows {shown}, the code gives {expected}"

    def write(self, text: str) -> str:
        match, values = self._match(text), self.values(text)
        pieces, last = [], match.start()
        for group, value in enumerate(values, start=1):
            pieces += [text[last : match.start(group)], value]
            last = match.end(group)
        return text[: match.start()] + "".join(pieces) + text[last:]


def _quickstart(text: str) -> tuple[str]:
    """What the README's Python example prints: its own code, run."""
    code = text[text.index("```python\nimport pipesim\n") + len("```python\n") :]
    code = code[: code.index("```")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    return (out.getvalue().strip(),)


def _steps_in_a_row(text: str) -> tuple[str, str]:
    """One step and the steady step of the README's `--steps 4 --no-barrier` example."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "--overhead 0.5 --steps 4 --no-barrier" in line)
    command = (lines[start - 1].rstrip("\\").strip() + " " + lines[start].strip())[len(PIPESIM) :]
    many = "\n".join(run_pipesim(command))
    one = "\n".join(run_pipesim(command.replace("--steps 4 --no-barrier", "").strip()))
    step = re.search(r"step time ([\d.]+) ms", one)
    steady = re.search(r"steady step ([\d.]+) ms", many)
    if step is None or steady is None:
        raise RuntimeError("simulate --steps: no 'step time' or 'steady step' in its output")
    return f"{float(step.group(1)):.1f}", f"{float(steady.group(1)):.1f}"


def _synthesized(lines: list[str]) -> list[str]:
    """The step, its bound (without the seconds the search took, which vary) and where the search started."""
    kept = [line for line in lines if line.startswith(("step time", "lower bound", "started from"))]
    return [re.sub(r" \(found by .*\)$", "", line) for line in kept]


OUTPUTS: tuple[Commented | Inline, ...] = (
    Inline("quickstart", r'ms per step"\)  # (.*)\n', _quickstart),
    Inline(
        "steps in a row", r"ZB-H2 gains there: ([\d.]+) ms for one step, ([\d.]+) ms per step in a row", _steps_in_a_row
    ),
    Commented(
        "jitter",
        "compare --schedules gpipe,1f1b,zb-h1 --ranks 4 --microbatches 16 --jitter 0.2",
        lambda lines: lines[:5],  # the table: its header, its rule, a row per schedule
    ),
    Commented(
        "synthesize",
        "synthesize --ranks 4 --microbatches 8 --f 1 --b 1.5 --w 0.5 --comm 0.2 --memory-limit 7 --time-limit 10 "
        "--csv out/synth.csv --json out/synth.json",
        _synthesized,
    ),
)


def drifts(text: str) -> list[str]:
    """One line per output of `text` (README.md's) that differs from what the code gives now."""
    return [line for line in (output.drift(text) for output in OUTPUTS) if line is not None]


def regenerate(text: str) -> str:
    for output in OUTPUTS:
        text = output.write(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report drifts, write nothing")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT)]
    text = README.read_text()
    if args.check:
        found = drifts(text)
        print("\n".join(found) or "README.md's outputs are the code's")
        return 1 if found else 0
    new = regenerate(text)
    if new != text:
        README.write_text(new)
    print("README.md: " + ("outputs regenerated" if new != text else "already up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
