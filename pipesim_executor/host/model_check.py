"""Checking a user's model (`--model package.module:factory`) without running it here.

The launcher (the command line, or the web page's server) never imports or calls a user-named module in its own
process: a module may do anything when imported or called (`http.server:test` serves forever, `os:abort` ends the
interpreter, `sys:exit` exits quietly). `check_custom_model` runs the check in a child process
(`pipesim_executor.custom_model.main`) in its own session, under a time limit (`PIPESIM_MODEL_CHECK_TIMEOUT_S`, default
120 s: importing torch on a busy machine takes a while) and a memory limit (`PIPESIM_MODEL_CHECK_MEMORY` bytes,
default half the machine's memory), and reads back only its verdict: a small JSON file of the unit count and
parameter counts, or the error in one line. A child that exits, aborts or runs out of time without a verdict is
one line naming what it did; its whole process group is ended.

The web page accepts only factories from places the app was started to accept (`app_model_sources`): the
shipped examples (`pipesim_examples`; `examples` in the checkout), plus the modules or folders listed in
`PIPESIM_APP_MODELS` when the app starts (`PIPESIM_APP_MODELS=mymodels streamlit run app.py`). The command line
takes any module: its user runs their own code by choice.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipesim.io.formats import read_json
from pipesim.limits import MAX_SMALL_FILE_BYTES
from pipesim.programs import in_checkout
from pipesim_executor.config import check_split_points, parse_spec
from pipesim_executor.processes import REPO_ROOT
from pipesim_executor.shipped_examples import CHECKOUT_PACKAGE, PACKAGE

TIMEOUT_ENV = "PIPESIM_MODEL_CHECK_TIMEOUT_S"
MEMORY_ENV = "PIPESIM_MODEL_CHECK_MEMORY"
APP_MODELS_ENV = "PIPESIM_APP_MODELS"
DEFAULT_TIMEOUT_S = 120.0
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class ModelVerdict:
    """What the check's child process found: the units (layers) and their parameter counts."""

    units: int
    parameters: int
    unit_parameters: tuple[int, ...] | None  # None past pipesim_executor.custom_model.MAX_UNITS_REPORTED units

    def describe(self) -> str:
        return f"{self.units} units, {self.parameters:,} parameters"


def _setting(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    text = env.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise ValueError(f"{name}={text!r}: give a number from {low:g} to {high:g}")
    return value


def _default_memory() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 * 1024**3
    return max(total // 2, 2 * 1024**3)


def _child_environment() -> dict[str, str]:
    """The ranks' import path (pipesim_executor.processes.run_environment): the repository, the caller's PYTHONPATH, and
    the folder the user launched from, so the check imports exactly what the ranks will."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH"), os.getcwd()) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _end_group(proc: subprocess.Popen) -> None:
    """End the child and everything it started (its own session), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def probe_custom_model(spec: str, env: Mapping[str, str] | None = None) -> ModelVerdict:
    """Import and call the factory in a child process and return its verdict; ValueError in one line naming the
    spec for every way it can fail (an error, an exit, an abort, no answer in time, too much memory)."""
    parse_spec(spec)  # the text form, before any process starts
    settings = os.environ if env is None else env
    timeout = _setting(settings, TIMEOUT_ENV, DEFAULT_TIMEOUT_S, 1.0, 86400.0)
    memory = int(_setting(settings, MEMORY_ENV, _default_memory(), 256 * 1024**2, 2**62))
    with tempfile.TemporaryDirectory(prefix="pipesim-model-check-") as folder:
        verdict_path = Path(folder) / "verdict.json"
        log_path = Path(folder) / "output.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pipesim_executor.custom_model", spec, str(verdict_path), str(memory)],
                cwd=REPO_ROOT, env=_child_environment(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,
            )  # fmt: skip
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _end_group(proc)
                raise ValueError(
                    f"model {spec}: the factory gave no answer within {timeout:g} s (does it serve, wait or loop "
                    f"forever?); it was stopped. A slow model: raise {TIMEOUT_ENV}"
                ) from None
            finally:
                if proc.returncode is None:
                    _end_group(proc)
            _end_group(proc)  # whatever the child started in its session goes with it
        if not verdict_path.exists():
            raise ValueError(
                f"model {spec}: checking it {_exit_reason(code)} before the factory returned (the module or the "
                f"factory ended the process){_last_line(log_path)}"
            )
        verdict = read_json(verdict_path, MAX_SMALL_FILE_BYTES)
    if not verdict.get("ok"):
        raise ValueError(str(verdict.get("error") or f"model {spec}: the check failed"))
    counts = verdict.get("unit_parameters")
    return ModelVerdict(int(verdict["units"]), int(verdict["parameters"]), None if counts is None else tuple(counts))


def _last_line(log_path: Path) -> str:
    from pipesim.io.bounded import read_tail

    try:
        lines = [line.strip() for line in read_tail(log_path, 4096).splitlines() if line.strip()]
    except ValueError:
        return ""
    fatal = [line for line in lines if line.startswith("Fatal Python error")]  # an abort's own line, not its stack
    words = (fatal or lines or [""])[-1 if not fatal else 0]
    return f"; its last words: {words[:200]}" if words else ""


def check_custom_model(spec: str, num_stages: int, split_points: Sequence[int] | None) -> ModelVerdict:
    """The launcher's check: the factory imports, runs and returns the right things (in a child process), and
    the model has a layer for every stage."""
    verdict = probe_custom_model(spec)
    if num_stages > verdict.units:
        raise ValueError(
            f"model {spec} has {verdict.units} layers but the schedule has {num_stages} stages and "
            "every stage needs one; use fewer ranks or virtual stages, or a model with more layers"
        )
    if split_points is not None:
        check_split_points(split_points, verdict.units, num_stages)
    return verdict


# --- the web page's opt-in -------------------------------------------------------------------------------------


def app_model_sources(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> tuple[str, ...]:
    """The module prefixes the web page accepts factories from: the shipped examples (`pipesim_examples`, and
    the checkout's `examples` where the app runs from the checkout), plus each entry of
    PIPESIM_APP_MODELS (comma-separated): a module (`mymodels`, `lab.models`) or a folder under the folder the
    app runs from (`mymodels/`, read as that module). ValueError naming an entry that is neither."""
    text = (os.environ if env is None else env).get(APP_MODELS_ENV, "")
    base = Path.cwd() if cwd is None else cwd
    sources = [PACKAGE, *([CHECKOUT_PACKAGE] if in_checkout() else [])]
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        if "/" in entry or entry.startswith("."):
            folder = (base / entry).resolve()
            try:
                parts = folder.relative_to(base.resolve()).parts
            except ValueError:
                parts = ()
            module = ".".join(parts)
            if not parts or not _MODULE.fullmatch(module):
                raise ValueError(
                    f"{APP_MODELS_ENV}: {entry!r} is not a folder under {base} that Python can import as a module"
                )
            entry = module
        if not _MODULE.fullmatch(entry):
            raise ValueError(f"{APP_MODELS_ENV}: {entry!r} is neither a module (mymodels) nor a folder (mymodels/)")
        sources.append(entry)
    return tuple(dict.fromkeys(sources))


def check_app_model(spec: str, sources: Sequence[str]) -> None:
    """ValueError unless the spec's module lies in one of `sources` (a module or a package's submodule), saying
    how to start the app so that it accepts it."""
    module, _ = parse_spec(spec)
    if any(module == source or module.startswith(source + ".") for source in sources):
        return
    top = module.split(".")[0]
    raise ValueError(
        f"model {spec}: this app takes factories only from {', '.join(sources)} (the places it was started to "
        f"accept); to add yours, start it as {APP_MODELS_ENV}={top} streamlit run app.py (modules or folders "
        "under the folder it runs from, comma-separated)"
    )
