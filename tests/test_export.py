"""Figure export: HTML everywhere; PNG/SVG/PDF where a Chromium is installed."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from pipesim.charts import export
from pipesim.charts.gantt import gantt_figure
from pipesim.cost.model import CostModel
from pipesim.schedules import build_schedule
from pipesim.sim.simulate import simulate

MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF"}


@pytest.fixture(scope="module")
def figure() -> go.Figure:
    return gantt_figure(simulate(build_schedule("zb-h1", 2, 3), CostModel.uniform(1.0, 2.0, 1.0)))


def test_html_is_self_contained_and_needs_no_browser(figure, monkeypatch):
    monkeypatch.setattr(export, "find_browser", lambda: None)
    page = export.figure_bytes(figure, "html").decode("utf-8")
    assert page.lstrip().startswith("<html>") and "</html>" in page
    assert "Plotly.newPlot" in page
    assert '<script src="http' not in page and len(page) > 1_000_000  # plotly.js is inlined: opens offline
    assert "0F0" in page


def test_unknown_format_lists_the_valid_ones(figure):
    with pytest.raises(ValueError, match="html, png, svg, pdf"):
        export.figure_bytes(figure, "jpeg")
    assert export.check_format(" .PNG ") == "png"


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_images_without_a_browser_raise_export_unavailable(figure, monkeypatch, fmt):
    monkeypatch.setattr(export, "find_browser", lambda: None)
    monkeypatch.setattr(export, "kaleido_installed", lambda: True)
    with pytest.raises(export.ExportUnavailable) as info:
        export.figure_bytes(figure, fmt)
    message = str(info.value)
    assert "Chromium" in message and "apt-get install chromium" in message and "HTML export still works" in message


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_images_without_kaleido_name_the_extra_that_brings_it(figure, monkeypatch, fmt):
    """Catches "needs Chromium, and none was found" while Chromium is on the PATH and what is missing is kaleido:
    the message names pipesim[export], not a browser."""
    monkeypatch.setattr(export, "kaleido_installed", lambda: False)
    monkeypatch.setattr(export, "find_browser", lambda: "/usr/bin/chromium")
    with pytest.raises(export.ExportUnavailable) as info:
        export.figure_bytes(figure, fmt)
    message = str(info.value)
    assert (
        "pip install 'pipesim[export]'" in message and "apt-get" not in message and "HTML export still works" in message
    )


def test_html_inlines_the_apps_cartesian_bundle(figure):
    """Catches the command line's --html inlining plotly's full 4.6 MB bundle while the app's export inlines the
    cartesian one: the same file, found in the checkout (static/) and installed (pipesim_app/static/)."""
    bundle = export.cartesian_bundle()
    assert bundle is not None and len(bundle) < 2_000_000
    page = export.figure_bytes(figure, "html").decode("utf-8")
    assert bundle[:2000] in page and len(page) < len(bundle) + 500_000


def test_html_only_batches_never_start_a_browser(figure, monkeypatch):
    def fail(jobs):
        assert not jobs, "a browser was asked for HTML"
        return []

    monkeypatch.setattr(export, "_run_in_thread", fail)
    [result] = export.export_figures([figure], ["html"])
    assert set(result) == {"html"}


@pytest.mark.skipif(not export.images_available(), reason="no Chrome/Chromium for kaleido (apt-get install chromium)")
def test_png_svg_pdf_in_one_session(figure):
    small = go.Figure(go.Bar(x=[1, 2], y=[3, 1]))
    results = export.export_figures([figure, small], ["png", "svg", "pdf", "html"])
    assert len(results) == 2
    for result in results:
        assert set(result) == {"png", "svg", "pdf", "html"}
        assert result["png"].startswith(MAGIC["png"])
        assert result["pdf"].startswith(MAGIC["pdf"])
        assert b"<svg" in result["svg"][:200]
    assert results[0]["png"] != results[1]["png"]
    assert b"0F0" in results[0]["svg"]  # bar labels are text in the SVG


@pytest.mark.skipif(not export.images_available(), reason="no Chrome/Chromium for kaleido (apt-get install chromium)")
def test_export_session_reuses_one_browser_for_repeated_exports(figure, monkeypatch):
    def no_private_browser(jobs):
        raise AssertionError("a browser of its own was started although the session's server runs")

    assert not export.export_server_running()
    with export.export_session():
        assert export.export_server_running()
        monkeypatch.setattr(export, "_run_in_thread", no_private_browser)
        first = export.figure_bytes(figure, "png")
        second = export.figure_bytes(go.Figure(go.Scatter(x=[0, 1], y=[1, 0])), "svg")
    assert not export.export_server_running()
    assert first.startswith(MAGIC["png"]) and b"<svg" in second[:200]
