"""pipesim as an installed package (issues 25, 34): what ships, what the core needs, and the names a user types.

The fast tests read the checkout; `test_installed_wheel_runs_a_shipped_example` builds the wheel and installs
it into a fresh venv (the wheel alone, its dependencies read from this environment: tests/helpers/wheel.py) and
runs the console scripts from a folder outside the checkout. The full install (the core's dependencies from the
index at requirements.txt's versions, `[run]` over a user's own torch) is bench/bench_install.py.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import pipesim
from pipesim.cli import app as cli_app
from pipesim.cli.common import UsageError
from pipesim.cli.main import main as pipesim_main
from tests.helpers.wheel import HEAVY, TINY_RUN, build_wheel, light_venv, ok, readme_example, run_outside

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The executor's import name, as installed: the package pipesim-run's entry point is in.
EXECUTOR = PYPROJECT["project"]["scripts"]["pipesim-run"].split(".")[0]
# Top-level packages of the checkout; only some ship (the rest are never installed).
FIRST_PARTY = {"pipesim", "executor", "pipesim_executor", "app_pages", "pipesim_app", "examples", "tests", "bench"}
# What each shipped part may import of them: pipesim stays below the executor and the app; the app's pages are
# top-level inside the app's own process (streamlit puts the app's folder on the path).
MAY_IMPORT = {
    "pipesim": {"pipesim"},
    EXECUTOR: {"pipesim", EXECUTOR},
    "app_pages": {"pipesim", EXECUTOR, "app_pages"},
    "app.py": {"app_pages"},
    "examples": {"pipesim", EXECUTOR},  # shipped as pipesim_examples: `examples.x` would not import installed
}


def test_pipesim_list_imports_no_torch_streamlit_plotly_or_networkx() -> None:
    """Catches a module-level import of plotly or networkx (e.g. pipesim.charts) on `list`'s path, `import
    pipesim` included: the core's quickest command stays quick, and runs where only the core is installed."""
    code = (
        "import sys; from pipesim.cli.main import main; status = main(['list']); "
        f"print(status, sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1f1b" in done.stdout and done.stdout.splitlines()[-1] == "0 []", done.stdout[-500:]


def test_every_package_of_the_checkout_ships() -> None:
    """pyproject lists its packages (the app's folder is mapped, not discovered): a new subpackage left out of
    the list would be missing from every install; a listed one that is gone would break the build."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    found = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for package in ("pipesim", EXECUTOR)
        for path in (ROOT / package).rglob("__init__.py")
    }
    app_packages = {
        ".".join(("pipesim_app", *path.parent.relative_to(ROOT).parts))
        for path in (ROOT / "app_pages").rglob("__init__.py")
    }
    mapped = {"pipesim_app", *app_packages, "pipesim_examples"}
    assert set(setuptools["packages"]) == found | mapped, "pyproject.toml [tool.setuptools] packages"
    assert setuptools["package-dir"] == {
        "pipesim_app": ".",
        **{name: name.removeprefix("pipesim_app.").replace(".", "/") for name in sorted(app_packages)},
        "pipesim_examples": "examples",
    }
    assert not list((ROOT / "examples").glob("*/__init__.py")), "examples/ ships as one package: no subpackages"
    assert (ROOT / "app.py").is_file() and (ROOT / "app_pages" / "__init__.py").is_file()
    assert (ROOT / "app_pages" / "parts" / "__init__.py").is_file()


def _named_modules(node: ast.AST) -> list[str]:
    """The modules a node names: imported (lazily too), started (`"-m", "name"`), or held as a dotted string."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    if isinstance(node, ast.List | ast.Tuple):
        items = [elt.value if isinstance(elt, ast.Constant) else None for elt in node.elts]
        return [name for flag, name in zip(items, items[1:], strict=False) if flag == "-m" and isinstance(name, str)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", node.value) else []
    return []


def test_shipped_code_names_only_shipped_packages() -> None:
    """Catches code that works in the checkout and fails installed: an import of a package that is not shipped
    (tests, examples, bench), of the executor by another name than the installed one (the checkout's
    `executor/` shim once the package is `pipesim_executor`), or a module started by name (`-m ...`, a constant
    like WORKER_MODULE) that is not shipped. Lazy imports count."""
    wrong = []
    for part, allowed in MAY_IMPORT.items():
        paths = [ROOT / part] if part.endswith(".py") else sorted((ROOT / part).rglob("*.py"))
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text())):
                for name in _named_modules(node):
                    top = name.split(".")[0]
                    if top in FIRST_PARTY and top not in allowed | {"pipesim", EXECUTOR}:
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
                    elif top in FIRST_PARTY and top not in allowed and not isinstance(node, ast.List | ast.Tuple):
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name} (only started as a process)")
    assert not wrong, "names what is not installed, or what this part may not import: " + ", ".join(wrong)


def test_the_shipped_examples_by_either_name_in_the_checkout() -> None:
    """Catches `pipesim_examples.X` (the name that works installed) failing in a checkout never installed, and an
    example module that would not be offered: every module of examples/ is listed, by its shipped name."""
    examples = importlib.import_module(f"{EXECUTOR}.shipped_examples")
    custom_model = importlib.import_module(f"{EXECUTOR}.custom_model")
    names = sorted(path.stem for path in (ROOT / "examples").glob("*.py") if not path.name.startswith("_"))
    assert "gpt_small" in names and list(examples.example_names()) == names
    assert examples.example_specs()[names.index("gpt_small")] == "pipesim_examples.gpt_small:build"
    if importlib.util.find_spec("pipesim_examples") is None:  # this environment holds the checkout, not installed
        assert examples.module_to_import("pipesim_examples.gpt_small") == "examples.gpt_small"
    assert examples.module_to_import("mymodels.gpt_small") == "mymodels.gpt_small"
    for spec in ("pipesim_examples.gpt_small:build", "examples.gpt_small:build"):
        assert callable(custom_model.load_factory(spec))
    assert "pipesim_examples.gpt_small:build" in examples.hint_for("examples.gpt_small")
    assert examples.hint_for("mymodels.gpt_small") == ""


def test_one_version_and_the_declared_dependencies() -> None:
    """The version is read from pipesim.__version__ (written nowhere else); the core depends on no torch or
    streamlit; torch is a range that the project's CPU build satisfies, so a torch already there is kept."""
    project = PYPROJECT["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pipesim.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", pipesim.__version__)
    names = [re.split(r"[<>=!~\[ ]", requirement)[0] for requirement in project["dependencies"]]
    assert names == ["numpy", "networkx", "plotly", "highspy", "tqdm"]
    extras = project["optional-dependencies"]
    assert extras["run"] == ["torch>=2.11,<2.14"]
    assert {"streamlit", "pandas"} <= {re.split(r"[<>=!~ ]", r)[0] for r in extras["app"]}
    assert project["scripts"] == {"pipesim": "pipesim.cli.main:main", "pipesim-run": f"{EXECUTOR}.__main__:main"}


def test_app_command_passes_the_apps_own_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """Started from any folder, the app keeps its config.toml's settings (listening on localhost only, static
    serving for the plotly bundle): they go to streamlit as flags, before the user's own, which win."""
    assert pipesim_main(["app", "--port", "8502", "--print-command", "--", "--server.address", "0.0.0.0"]) == 0
    command = capsys.readouterr().out.split()
    assert command[1:5] == ["-m", "streamlit", "run", str(ROOT / "app.py")]
    for flag in ("--server.address=localhost", "--server.enableStaticServing=true", "--server.maxUploadSize=16"):
        assert flag in command
    assert command[-3:] == ["--server.port=8502", "--server.address", "0.0.0.0"]


def test_app_command_refuses_bad_input_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert pipesim_main(["app", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "<= 65,535" in err
    broken = tmp_path / "config.toml"
    broken.write_text("[server\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        cli_app.config_flags(broken)
    broken.write_bytes(b"#" * (cli_app.MAX_CONFIG_BYTES + 1))
    with pytest.raises(UsageError, match="over"):
        cli_app.config_flags(broken)
    os.mkfifo(tmp_path / "fifo")
    assert cli_app.config_flags(tmp_path / "fifo") == []  # not a regular file: never opened, never blocks


def test_without_torch_runs_are_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Catches `pipesim-run run|doctor|verify-plan` or a launch (the app's Run page) going ahead where only the
    core is installed: torchrun would fail in the run's log, the doctor with a traceback. Reading run folders
    needs no torch."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "torch" else real(name, *rest))
    entry = importlib.import_module(f"{EXECUTOR}.__main__")
    for command in (["doctor"], ["run", "--schedule", "1f1b"], ["verify-plan", "plan.json"]):
        assert entry.main(command) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith(f"python -m executor: error: {command[0]} needs torch")
            and err.count("\n") == 1
            and "pipesim[run]" in err
        )
    assert entry.main(["list", "--runs-root", str(tmp_path)]) == 0
    checks = importlib.import_module(f"{EXECUTOR}.host.checks")
    run_config = importlib.import_module(f"{EXECUTOR}.config").run_config
    with pytest.raises(
        ValueError, match=r"a run needs torch, and torch is not installed here: pip install 'pipesim\[run\]'"
    ):
        checks.check_run(run_config(device="cpu"))


def test_readme_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-c", readme_example()], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1f1b: 33.0 ms per step"


@pytest.mark.torchrun
@pytest.mark.timeout(900)
def test_installed_wheel_runs_a_shipped_example(tmp_path: Path) -> None:
    """Catches what works in the checkout and not installed: an example model left out of the wheel
    (`pipesim_examples`), a console script that points nowhere or names the program by a module path
    (`python -m executor` does not exist installed), a module the wheel leaves out that `list`, a simulation,
    the README's example or a real run needs. Runs from a folder outside the checkout, without PYTHONPATH."""
    work = tmp_path / "work"
    work.mkdir()
    wheel = build_wheel(tmp_path)
    assert wheel.name.startswith(f"pipesim-{pipesim.__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.namelist()
    assert {"pipesim_app/static/plotly-cartesian-3.7.0.min.js", "pipesim_app/static/favicon.png"} <= set(shipped)
    assert not any(name.startswith(("tests/", "bench/", "app_pages/", "examples/")) for name in shipped)
    examples = sorted(path.name for path in (ROOT / "examples").glob("*.py"))
    assert [name for name in examples if f"pipesim_examples/{name}" not in shipped] == [], "examples left out"

    venv = light_venv(tmp_path, wheel, "run")
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    where = ok(run_outside([python, "-c", "import pipesim, pipesim_examples; print(pipesim.__file__)"], work))
    assert where.startswith(str(venv)), where
    assert "zbv" in ok(run_outside([bin_dir / "pipesim", "list"], work))
    simulate = ["simulate", "--schedule", "1f1b", "--ranks", "4", "--microbatches", "8", "--f", "1", "--b", "2"]
    assert "makespan 33.000 ms" in ok(run_outside([bin_dir / "pipesim", *simulate], work))
    assert ok(run_outside([python, "-c", readme_example()], work)).strip() == "1f1b: 33.0 ms per step"
    usage = ok(run_outside([bin_dir / "pipesim-run", "run", "--help"], work))
    assert usage.startswith("usage: pipesim-run run") and "python -m" not in usage, usage[:300]
    wrong = run_outside([bin_dir / "pipesim", "simulate", "--no-such-flag"], work)
    assert wrong.returncode == 2 and wrong.stderr.startswith("pipesim: error: "), wrong.stderr
    assert "(see: pipesim simulate --help)" in wrong.stderr

    old_name = run_outside([bin_dir / "pipesim-run", "run", "--model", "examples.gpt_small:build", *TINY_RUN], work)
    assert old_name.returncode == 2 and old_name.stderr.count("\n") == 1, old_name.stderr
    assert old_name.stderr.startswith("pipesim-run: error: ") and "pipesim_examples.gpt_small:build" in old_name.stderr
    out = ["--out", "runs/example"]
    ran = run_outside(
        [bin_dir / "pipesim-run", "run", "--model", "pipesim_examples.gpt_small:build", *TINY_RUN, *out], work
    )
    assert ok(ran) and (work / "runs" / "example" / "measured.json").is_file(), ran.stdout[-2000:]
    assert "pipesim_examples.gpt_small:build" in (work / "runs" / "example" / "config.json").read_text()
