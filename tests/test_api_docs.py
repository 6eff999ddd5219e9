"""docs/api.md and pipesim's public surface: every example on the page runs, the surface is exactly
`__all__`, and `import pipesim` stays light."""

from __future__ import annotations

import codeop
import re
import subprocess
import sys
from pathlib import Path

import pipesim

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "api.md"


def test_every_example_on_the_api_page_runs(capsys) -> None:
    """Catches a page that names a function, argument or field the code no longer has (each block asserts too)."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{PAGE.name}, python block {number}", "exec")
        exec(code, namespace)  # noqa: S102 - the page's own examples, as a reader would run them
    assert "candidates" in capsys.readouterr().out


def test_every_example_pastes_into_pythons_prompt() -> None:
    """Catches a block that runs as a file but not pasted at `>>>`: the prompt ends an indented block
    only at a blank line, so an unindented line right after a `for` loop's body is a SyntaxError there. Each
    line is fed as the interactive console feeds it (codeop), without running anything."""
    for number, block in enumerate(re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S), 1):
        buffer: list[str] = []
        for line_number, line in enumerate([*block.splitlines(), ""], 1):
            buffer.append(line)
            try:
                complete = codeop.compile_command("\n".join(buffer), "<stdin>", "single")
            except SyntaxError as error:
                raise AssertionError(f"docs/api.md block {number}, line {line_number}: {error.msg}: {line!r}") from None
            if complete is not None:
                buffer = []


def test_the_table_names_every_public_name() -> None:
    table = {name for row in re.findall(r"^\| (.*?) \|", PAGE.read_text(), re.M) for name in re.findall(r"`(\w+)", row)}
    assert set(pipesim.__all__) <= table, set(pipesim.__all__) - table
    for name in pipesim.__all__:
        assert getattr(pipesim, name) is not None
    assert set(dir(pipesim)) >= set(pipesim.__all__)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    try:
        pipesim.simulate_everything  # noqa: B018
    except AttributeError as error:
        assert "simulate_everything" in str(error)
    else:
        raise AssertionError("an unknown name resolved")


def test_import_pipesim_loads_no_numpy_networkx_or_plotly() -> None:
    code = (
        "import sys, pipesim; pipesim.build_schedule; pipesim.CostModel; "
        "print(sorted(m for m in ('numpy', 'networkx', 'plotly', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
