"""Shared fixtures: the app under streamlit.testing.AppTest, opened on a page, with runs in a temporary folder."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pipesim.io.launch_history import ENV as LAUNCH_HISTORY_ENV
from pipesim_executor.host.machine import LOCK_ENV

APP = str(Path(__file__).resolve().parent.parent / "app.py")

# The machine's lock (pipesim_executor.host.machine) is the tests' own: one per test process for what a module
# starts (an app server), one per test below, so tests never wait on each other, on another checkout's tests or
# on a user's run on this machine. The tests of the lock itself set their own.
_LOCK_DIR = tempfile.mkdtemp(prefix="pipesim-lock-")
atexit.register(shutil.rmtree, _LOCK_DIR, True)
os.environ[LOCK_ENV] = str(Path(_LOCK_DIR) / "machine.lock")
# Likewise the record of launch spreads (pipesim.io.launch_history): a test's verification must not widen another
# test's plan, nor write into the user's ~/.cache.
os.environ[LAUNCH_HISTORY_ENV] = str(Path(_LOCK_DIR) / "launch_spread.jsonl")


@pytest.fixture(autouse=True)
def _own_machine_lock(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOCK_ENV, str(tmp_path_factory.mktemp("lock") / "machine.lock"))
    monkeypatch.setenv(LAUNCH_HISTORY_ENV, str(tmp_path_factory.mktemp("launches") / "launch_spread.jsonl"))


@pytest.fixture
def open_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str | None], AppTest]:
    """open_page("compare") -> a fresh app session on app_pages/compare.py (None: the default page).

    Run folders go to a temporary folder (PIPESIM_RUNS_ROOT), so no test reads or writes ./runs. Each call is a
    new session, as a reload in a browser is.
    """
    monkeypatch.setenv("PIPESIM_RUNS_ROOT", str(tmp_path / "runs"))

    def open_(page: str | None = None) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60).run()
        if page is not None:
            at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, at.exception
        return at

    return open_


SLOW_MARKERS = ("torchrun", "browser")  # tests that start real processes: seconds to a minute each


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker (scripts/test.sh: -n 3 --dist loadfile), the files holding tests that start real
    processes go first, each file still whole and in its own order: the workers hand out files in this order,
    so the long files start early and the last minutes are not one long file on one worker while the other
    idles. A plain `pytest` keeps the collection order."""
    if not hasattr(config, "workerinput"):
        return
    slow_files = {item.path for item in items if any(item.get_closest_marker(name) for name in SLOW_MARKERS)}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: within each group, the collection order
