"""Shared fixtures: the app under streamlit.testing.AppTest, opened on a page, with runs in a temporary folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


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
