"""The app's imports. First page load: the Simulate page's modules must not pull in what only other pages need.

networkx (DAG page), the executor (Run page), kaleido (image export), torch and pandas (tables) each cost
start-up time that a first visit to the Simulate page would pay for nothing. And the app reaches pipesim only
through its faces, the list docs/design.md keeps.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers.module_refs import dotted_resolves

ROOT = Path(__file__).resolve().parent.parent


def test_simulate_page_modules_load_no_heavy_extras() -> None:
    code = (
        "import sys; import app_pages.parts.cached, app_pages.parts.widgets, app_pages.parts.cost_inputs, "
        "app_pages.parts.state, app_pages.parts.guide, app_pages.parts.schedule_inputs, app_pages.parts.plot, "
        "pipesim.charts.gantt, pipesim.charts.lod, pipesim.sim.simulate, pipesim.analysis.critical_path; "
        "print(sorted(m for m in ('networkx', 'pipesim_executor', 'kaleido', 'torch', 'pandas', 'highspy', "
        "'pipesim.synth')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


# --- the app through pipesim's faces (docs/design.md) ------------------------------------------------------------

FACES_HEADING = "## The app through pipesim's faces"


def _faces() -> set[str]:
    """The modules the app may import from pipesim: every `pipesim...` name in the bullets of the design's section."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split(FACES_HEADING, 1)[1].split("\n## ", 1)[0]
    bullets = re.findall(r"^\* (.*(?:\n  .*)*)", section, re.M)
    return {name for bullet in bullets for name in re.findall(r"`(pipesim(?:\.\w+)*)`", bullet)}


def _is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _pipesim_imports(source: str) -> list[tuple[int, str, str | None]]:
    """(line, module, name imported from it or None) of every pipesim import in `source` (a submodule imported
    from its package counts as the submodule)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "pipesim"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipesim":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((node.lineno, sub, None) if _is_module(sub) else (node.lineno, node.module, alias.name))
    return found


def _app_files() -> list[Path]:
    return [ROOT / "app.py", *sorted((ROOT / "app_pages").rglob("*.py"))]


def test_the_app_imports_only_pipesims_faces() -> None:
    faces = _faces()
    assert {"pipesim.api", "pipesim.cost", "pipesim.schedules"} <= faces and all(_is_module(m) for m in faces)
    outside = []
    for path in _app_files():
        for line, module, name in _pipesim_imports(path.read_text(encoding="utf-8")):
            where = f"{path.relative_to(ROOT)}:{line}"
            if module not in faces:
                outside.append(f"{where}: {module} (not a face listed in docs/design.md)")
            elif name is not None and not dotted_resolves(f"{module}.{name}"):
                outside.append(f"{where}: {module} does not export {name}")
    assert not outside, "the app reaches past pipesim's faces:\n" + "\n".join(outside)


def test_the_face_check_sees_an_inside_import() -> None:
    source = "from pipesim.cost.model import CostModel\nfrom pipesim.cost import CostModel\nimport pipesim.sim.spread\n"
    found = _pipesim_imports(source)
    assert found == [
        (1, "pipesim.cost.model", "CostModel"),
        (2, "pipesim.cost", "CostModel"),
        (3, "pipesim.sim.spread", None),
    ]
    assert "pipesim.cost.model" not in _faces() and "pipesim.sim.spread" not in _faces()


def test_every_face_exports_what_its_home_defines_and_no_module_name() -> None:
    """A face's name is defined in the module it names, and never also one of the package's modules (the package's
    attribute would turn from the name into the module once that module is loaded)."""
    wrong = []
    for init in sorted((ROOT / "pipesim").rglob("__init__.py")):
        package = ".".join(init.parent.relative_to(ROOT).parts)
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            if not (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FACE" for t in node.targets)):
                continue
            face = ast.literal_eval(node.value)
            wrong += [f"{package}.{n}: a module" for n in face if _is_module(f"{package}.{n}")]
            wrong += [f"{package}.{n}: not in {home}" for n, home in face.items() if not dotted_resolves(f"{home}.{n}")]
    assert not wrong, "\n".join(wrong)
