"""Fetch plotly.js while the first page draws its widgets.

Streamlit loads its plotly chart code (a 4.7 MB script, about 1.5 s to evaluate on a 2-core machine without
a GPU) only when the first chart is drawn, and a page draws its sidebar widgets first: the chart library then
starts late and the page's first chart comes last. A new session's first run asks the browser to import that
same script at once, so it loads while the widgets draw; Streamlit's own import then finds it loaded (the
browser keeps one copy of a module per URL). Nothing changes on the page if the file is not found.
"""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

_REQUESTED = "chart_library_requested"


@functools.cache
def _chart_module() -> str | None:
    """The chart code's file name in Streamlit's static folder (it carries a content hash)."""
    found = sorted((Path(st.__file__).parent / "static" / "static" / "js").glob("PlotlyChart.*.js"))
    return found[0].name if len(found) == 1 else None


def chart_library() -> None:
    """Once per session, on its first run: start importing the chart code in the browser."""
    name = _chart_module()
    if name is None or st.session_state.get(_REQUESTED):
        return
    st.session_state[_REQUESTED] = True
    st.html(f'<script>import(new URL("./static/js/{name}", document.baseURI).href)</script>',
            unsafe_allow_javascript=True)
