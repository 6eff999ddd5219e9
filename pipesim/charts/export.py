"""Figures to bytes: HTML always; PNG, SVG and PDF through kaleido and a local Chromium.

kaleido 1.x renders in the system's Chrome/Chromium. Starting the browser costs
seconds, so `export_figures` renders a whole batch in one browser session rather
than one browser per image, and that session ends with the call. A caller that
exports again and again (an app) opens `export_session()` (or
`start_export_server()`) once: kaleido's shared server then keeps one browser
for every export until it is stopped. pipesim itself keeps nothing at module level.

When kaleido is not installed (`pipesim[export]`) or no browser is, image formats raise `ExportUnavailable`
naming which and the command that fixes it; HTML never needs a browser (plotly.js is embedded, so the file
works offline: plotly.js's cartesian bundle, the one the app serves, where it is found, as the app's export does).
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # plotly loads only with the figures, so `python -m pipesim list` stays quick
    import plotly.graph_objects as go

FORMATS = ("html", "png", "svg", "pdf")
IMAGE_FORMATS = ("png", "svg", "pdf")
MIME_TYPES = MappingProxyType(
    {"html": "text/html", "png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"}
)
NO_KALEIDO_MESSAGE = (
    "PNG/SVG/PDF export needs the kaleido package, which is not installed here: pip install 'pipesim[export]' "
    "(kaleido drives a Chrome/Chromium on the PATH); HTML export still works"
)
NO_BROWSER_MESSAGE = (
    "PNG/SVG/PDF export needs Chromium, and none was found: apt-get install chromium "
    "(or set BROWSER_PATH to a Chrome/Chromium binary); HTML export still works"
)
# plotly.js's cartesian bundle (bars, scatters, heatmaps: every trace pipesim draws; 1.4 MB against the full 4.6 MB),
# the same plotly.js version as the plotly package (a test checks). It lives with the app, which serves it:
# static/ in the checkout, pipesim_app/static/ installed beside pipesim.
PLOTLY_JS = "plotly-cartesian-3.7.0.min.js"
_BUNDLE_PLACES = (
    Path(__file__).resolve().parents[2] / "static",
    Path(__file__).resolve().parents[2] / "pipesim_app" / "static",
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
    return kaleido_installed() and find_browser() is not None


def kaleido_installed() -> bool:
    return importlib.util.find_spec("kaleido") is not None


def unavailable_reason() -> str | None:
    """Why images cannot be rendered here (kaleido missing, or no browser), or None when they can."""
    if not kaleido_installed():
        return NO_KALEIDO_MESSAGE
    return None if find_browser() is not None else NO_BROWSER_MESSAGE


@functools.cache
def cartesian_bundle() -> str | None:
    """The text of plotly.js's cartesian bundle the app serves, or None where it is not found (HTML exports then
    inline plotly's full bundle)."""
    for folder in _BUNDLE_PLACES:
        if (folder / PLOTLY_JS).is_file():
            return (folder / PLOTLY_JS).read_text(encoding="utf-8")
    return None


def html_bytes(fig: go.Figure, plotly_js: str | None = None) -> bytes:
    """A self-contained HTML page (plotly.js inlined once, so it opens without a network).

    `plotly_js`: the text of the plotly.js bundle to inline instead of plotly's full one (4.6 MB), e.g. its
    cartesian bundle (1.4 MB), which draws every trace type pipesim's charts use (bars, scatters, heatmaps)."""
    if plotly_js is None:
        return fig.to_html(include_plotlyjs=True, full_html=True).encode("utf-8")
    page = fig.to_html(include_plotlyjs=False, full_html=True)
    head = page.index("<head>") + len("<head>")
    script = '<script type="text/javascript">' + plotly_js.replace("</script", "<\\/script") + "</script>"
    return (page[:head] + script + page[head:]).encode("utf-8")


def _image_opts(fig: go.Figure, fmt: str) -> dict[str, Any]:
    height = fig.layout.height or 500
    width = fig.layout.width or DEFAULT_WIDTH
    return {"format": fmt, "width": width, "height": height, "scale": 2 if fmt == "png" else 1}


def _kaleido_options() -> dict[str, Any]:
    # mathjax=False: the default pulls MathJax from a CDN, which hangs without a network.
    return {"n": 1, "timeout": RENDER_TIMEOUT_S, "mathjax": False}


def export_server_running() -> bool:
    """Whether kaleido's shared server (see `start_export_server`) is up."""
    try:
        import kaleido
    except ImportError:
        return False
    server = getattr(kaleido, "_global_server", None)  # kaleido's own singleton; no public query exists
    return bool(server is not None and server.is_running())


def start_export_server() -> None:
    """Start one browser that every later image export reuses, until `stop_export_server`."""
    reason = unavailable_reason()
    if reason is not None:
        raise ExportUnavailable(reason)
    import kaleido

    kaleido.start_sync_server(silence_warnings=True, **_kaleido_options())


def stop_export_server() -> None:
    try:
        import kaleido
    except ImportError:
        return
    kaleido.stop_sync_server(silence_warnings=True)


@contextmanager
def export_session() -> Iterator[None]:
    """`with export_session(): ...` keeps one browser for all exports in the block.

    Stops the server on exit only if this block started it.
    """
    started = not export_server_running()
    if started:
        start_export_server()
    try:
        yield
    finally:
        if started:
            stop_export_server()


async def _render_all(jobs: Sequence[tuple[go.Figure, str]]) -> list[bytes]:
    import kaleido

    async with kaleido.Kaleido(**_kaleido_options()) as session:
        return [await session.calc_fig(fig, opts=_image_opts(fig, fmt)) for fig, fmt in jobs]


def _run_in_thread(jobs: Sequence[tuple[go.Figure, str]]) -> list[bytes]:
    """Run the async renderer on a private event loop, so callers that own a loop (Streamlit) are unaffected."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            import asyncio  # only to render images (0.1 s to import)

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
    reason = unavailable_reason()
    if reason is not None:
        raise ExportUnavailable(reason)
    try:
        if export_server_running():
            import kaleido

            return [kaleido.calc_fig_sync(fig, opts=_image_opts(fig, fmt)) for fig, fmt in jobs]
        return _run_in_thread(jobs)
    except ImportError as error:
        raise ExportUnavailable(f"{NO_KALEIDO_MESSAGE} ({error})") from None
    except Exception as error:  # kaleido and choreographer raise their own types, or a bare one of the loop's
        if type(error).__name__ == "ChromeNotFoundError":
            raise ExportUnavailable(NO_BROWSER_MESSAGE) from None
        raise ExportUnavailable(
            f"PNG/SVG/PDF export failed: the browser {find_browser()} did not render the figure "
            f"({type(error).__name__}: {_first_line(error)}); set BROWSER_PATH to a working Chrome/Chromium; "
            "HTML export still works"
        ) from None


def _first_line(error: BaseException) -> str:
    text = error.args[0] if error.args and isinstance(error.args[0], str) else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:200] if lines else "no message"


def export_figures(figs: Sequence[go.Figure], fmts: Iterable[str]) -> list[dict[str, bytes]]:
    """Every figure in every format: one dict {format: bytes} per figure, in order.

    All images are rendered in one browser: the shared server's when one runs, else one
    started for this call.
    """
    formats = [check_format(fmt) for fmt in fmts]
    jobs = [(fig, fmt) for fig in figs for fmt in formats if fmt in IMAGE_FORMATS]
    images = iter(_render_images(jobs))
    results = []
    for fig in figs:
        result = {}
        for fmt in formats:
            result[fmt] = html_bytes(fig, cartesian_bundle()) if fmt == "html" else next(images)
        results.append(result)
    return results


def figure_bytes(fig: go.Figure, fmt: str) -> bytes:
    """One figure in one format ("html", "png", "svg" or "pdf")."""
    return export_figures([fig], [fmt])[0][check_format(fmt)]
