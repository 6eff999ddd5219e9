"""pipesim as an installed package (issue 25): what ships, what the core needs, and a user's own torch kept.

The fast tests read the checkout; `test_installed_beside_a_users_torch` builds the wheel once and installs it
into a fresh venv (about a minute: the core's dependencies come from pip's cache or the index at the versions
requirements.txt pins, torch 2.13.0 from the machine's local wheel), then uninstalls it and installs it
again with the `run` extra over a torch installed first, as a user with their own CUDA build would.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import shutil
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
}
HEAVY = ("torch", "streamlit", "plotly", "networkx", "pandas", "kaleido")
NOT_SHIPPED = shutil.ignore_patterns(
    ".git", ".venv", "runs", "out", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache",
    ".hypothesis", "test-artifacts", ".whl", ".gl", "variant_*.py",
)  # fmt: skip


def readme_example() -> str:
    """The README's Python example: its first python block."""
    match = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert match, "README.md has no ```python block"
    return match.group(1)


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
    app = {"pipesim_app", "pipesim_app.app_pages"}
    assert set(setuptools["packages"]) == found | app, "pyproject.toml [tool.setuptools] packages"
    assert setuptools["package-dir"] == {"pipesim_app": ".", "pipesim_app.app_pages": "app_pages"}
    assert (ROOT / "app.py").is_file() and (ROOT / "app_pages" / "__init__.py").is_file()


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


def test_one_version_and_the_declared_dependencies() -> None:
    """The version is read from pipesim.__version__ (written nowhere else); the core depends on no torch or
    streamlit; torch is a range that the project's CPU build satisfies, so a torch already there is kept."""
    project = PYPROJECT["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pipesim.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", pipesim.__version__)
    names = [re.split(r"[<>=!~\[ ]", requirement)[0] for requirement in project["dependencies"]]
    assert names == ["numpy", "networkx", "plotly", "highspy"]
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
        assert err.startswith(f"error: {command[0]} needs torch") and err.count("\n") == 1 and "pipesim[run]" in err
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


def _run(command: list[str | Path], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """In `cwd` (outside the checkout) and without PYTHONPATH: only what the venv holds can be imported."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"{done.args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _torch_files(venv: Path) -> tuple:
    """What a reinstall of torch would change: its metadata folder and its files' identity."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    stat = (site / "torch" / "__init__.py").stat()
    return sorted(p.name for p in site.glob("torch-*.dist-info")), stat.st_ino, stat.st_mtime_ns


@pytest.mark.torchrun
@pytest.mark.timeout(1200)
def test_installed_beside_a_users_torch(tmp_path: Path) -> None:
    """Catches: a core dependency on torch or streamlit; `run`'s torch pinned or ranged past the user's (the
    reinstall is offline, so it fails rather than downloading another torch); a module that `pipesim list`, a
    simulation, the README's example or a tiny real run needs but the wheel leaves out; a console script that
    points nowhere."""
    source, wheels, venv, work = (tmp_path / name for name in ("src", "wheels", "venv", "work"))
    shutil.copytree(ROOT, source, ignore=NOT_SHIPPED)  # the build writes build/ and egg-info: not in the checkout
    work.mkdir()
    try:
        _ok(
            _run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, source], work
            )
        )
        (wheel,) = wheels.glob("pipesim-*.whl")
        assert wheel.name.startswith(f"pipesim-{pipesim.__version__}-")
        with zipfile.ZipFile(wheel) as archive:
            shipped = archive.namelist()
        assert "pipesim_app/static/plotly-cartesian-3.7.0.min.js" in shipped
        assert not any(name.startswith(("tests/", "bench/", "app_pages/", "examples/")) for name in shipped)
        # CI's versions of the core's dependencies (cached); torch left free, as a user's would be
        constraints = tmp_path / "constraints.txt"
        pins = (ROOT / "requirements.txt").read_text().splitlines()
        constraints.write_text("\n".join(line for line in pins if not line.startswith("torch")))

        _ok(_run([sys.executable, "-m", "venv", venv], work))
        python, bin_dir = venv / "bin" / "python", venv / "bin"
        pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-c", constraints]
        _ok(_run([*pip, wheel], work))
        present = _ok(
            _run([python, "-c", f"import importlib.util as u; print([m for m in {HEAVY!r} if u.find_spec(m)])"], work)
        )
        assert present.strip() == "['plotly', 'networkx']", present
        where = _ok(_run([python, "-c", "import pipesim; print(pipesim.__file__)"], work))
        assert where.startswith(str(venv)), where
        assert "zbv" in _ok(_run([bin_dir / "pipesim", "list"], work))
        simulate = ["simulate", "--schedule", "1f1b", "--ranks", "4", "--microbatches", "8", "--f", "1", "--b", "2"]
        simulated = _ok(_run([bin_dir / "pipesim", *simulate], work))
        assert "makespan 33.000 ms" in simulated
        assert _ok(_run([python, "-c", readme_example()], work)).strip() == "1f1b: 33.0 ms per step"
        assert "no runs under" in _ok(_run([bin_dir / "pipesim-run", "list", "--runs-root", work / "runs"], work))
        needs_extra = {("pipesim-run", "run", "--schedule", "1f1b"): "pipesim[run]", ("pipesim", "app"): "pipesim[app]"}
        for command, extra in needs_extra.items():
            refused = _run([bin_dir / command[0], *command[1:]], work)
            assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
            assert extra in refused.stderr and "Traceback" not in refused.stderr

        # The user's own torch first (here the project's CPU build, from the machine's local wheel), then
        # pipesim[run], offline: pip must find torch already satisfied and leave it as it is.
        _ok(_run([python, "-m", "pip", "uninstall", "-y", "pipesim"], work))
        _ok(_run([*pip, "torch==2.13.0"], work))
        before = _torch_files(venv)
        installed = _ok(_run([*pip, "--no-index", f"{wheel}[run]"], work))
        assert "Uninstalling torch" not in installed and _torch_files(venv) == before, installed
        assert _ok(_run([python, "-c", "import torch; print(torch.__version__)"], work)).strip() == "2.13.0+cpu"
        tiny = ["--ranks", "2", "--microbatches", "2", "--steps", "1", "--warmup-steps", "0", "--device", "cpu",
                "--layers", "2", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq-len", "8", "--vocab", "32",
                "--batch-size", "2", "--out", "runs/tiny"]  # fmt: skip
        ran = _run([bin_dir / "pipesim-run", "run", "--schedule", "1f1b", *tiny], work)
        assert _ok(ran) and (work / "runs" / "tiny" / "measured.json").is_file(), ran.stdout[-2000:]
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # about 1 GB: pytest would keep the last three runs
