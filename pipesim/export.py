"""Figures to bytes: HTML always; PNG, SVG and PDF through kaleido and a local Chromium.

kaleido 1.x renders in the system's Chrome/Chromium. Starting the browser costs
seconds, so `export_figures` renders a whole batch in one browser session rather
than one browser per image. The session lives only for the call: no server is left
running behind the caller's back, and nothing is kept at module level.

When no browser is installed, image formats raise `ExportUnavailable` with a plain
message; HTML never needs a browser (plotly.js is embedded, so the file works offline).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from types import MappingProxyType
from typing import Any

import plotly.graph_objects as go

FORMATS = ("html", "png", "svg", "pdf")
IMAGE_FORMATS = ("png", "svg", "pdf")
MIME_TYPES = MappingProxyType({"html": "text/html", "png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"})
NO_BROWSER_MESSAGE = (
    "PNG/SVG/PDF export needs Chromium, and none was found: apt-get install chromium "
    "(or set BROWSER_PATH to a Chrome/Chromium binary); HTML export still works"
)
DEFAULT_WIDTH = 1200  # pixels; a Gantt chart needs width more than height
RENDER_TIMEOUT_S = 120


class ExportUnavailable(RuntimeError):
    """Image export is impossible here (no Chromium, or kaleido missing); HTML still works."""


def check_format(fmt: str) -> str:
    """Normalise a format name; unknown ones raise ValueError listing the valid ones."""
    key = fmt.strip().lower().lstrip(".")
    if key not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    return key


def find_browser() -> str | None:
    """Path of the Chrome/Chromium kaleido would use, or None (looks, starts nothing)."""
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return None
    return Chromium.find_browser(skip_local=False)


def images_available() -> bool:
    return find_browser() is not None


def html_bytes(fig: go.Figure) -> bytes:
    """A self-contained HTML page (plotly.js inlined, so it opens without a network)."""
    return fig.to_html(include_plotlyjs=True, full_html=True).encode("utf-8")


def _image_opts(fig: go.Figure, fmt: str) -> dict[str, Any]:
    height = fig.layout.height or 500
    width = fig.layout.width or DEFAULT_WIDTH
    return {"format": fmt, "width": width, "height": height, "scale": 2 if fmt == "png" else 1}


async def _render_all(jobs: Sequence[tuple[go.Figure, str]]) -> list[bytes]:
    import kaleido

    # mathjax=False: the default pulls MathJax from a CDN, which hangs without a network.
    async with kaleido.Kaleido(n=1, timeout=RENDER_TIMEOUT_S, mathjax=False) as session:
        return [await session.calc_fig(fig, opts=_image_opts(fig, fmt)) for fig, fmt in jobs]


def _run_in_thread(jobs: Sequence[tuple[go.Figure, str]]) -> list[bytes]:
    """Run the async renderer on a private event loop, so callers that own a loop (Streamlit) are unaffected."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(_render_all(jobs))
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    worker = threading.Thread(target=target, name="pipesim-export", daemon=True)
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _render_images(jobs: Sequence[tuple[go.Figure, str]]) -> list[bytes]:
    if not jobs:
        return []
    if not images_available():
        raise ExportUnavailable(NO_BROWSER_MESSAGE)
    try:
        return _run_in_thread(jobs)
    except ImportError as error:
        raise ExportUnavailable(f"PNG/SVG/PDF export needs the kaleido package ({error}); HTML export still works") from None
    except Exception as error:
        if type(error).__name__ == "ChromeNotFoundError":
            raise ExportUnavailable(NO_BROWSER_MESSAGE) from None
        raise


def export_figures(figs: Sequence[go.Figure], fmts: Iterable[str]) -> list[dict[str, bytes]]:
    """Every figure in every format: one dict {format: bytes} per figure, in order.

    All images are rendered in one browser session.
    """
    formats = [check_format(fmt) for fmt in fmts]
    jobs = [(fig, fmt) for fig in figs for fmt in formats if fmt in IMAGE_FORMATS]
    images = iter(_render_images(jobs))
    results = []
    for fig in figs:
        result = {}
        for fmt in formats:
            result[fmt] = html_bytes(fig) if fmt == "html" else next(images)
        results.append(result)
    return results


def figure_bytes(fig: go.Figure, fmt: str) -> bytes:
    """One figure in one format ("html", "png", "svg" or "pdf")."""
    return export_figures([fig], [fmt])[0][check_format(fmt)]
