"""Draw a plotly figure on a page: `show(fig, key)`, the one way every page puts a chart on screen.

Why not st.plotly_chart: Streamlit's plotly element loads a 4.7 MB chunk (all of plotly.js, every trace type)
whose evaluation is a 1.25 s task on a first visit (docs/benchmarks.md, "first page load"). pipesim draws only
bars, scatters and heatmaps, which plotly.js's own cartesian bundle (1.4 MB, the same plotly.js version as the
plotly package) holds. The app serves that file from static/ (`server.enableStaticServing` in
.streamlit/config.toml) and a small Streamlit component (components v2, in the page's own DOM so plotly's styles
and the `.js-plotly-plot` element are as usual) draws the figure with it, with Plotly.react on reruns. Its
modebar has the full-screen button that Streamlit's element has.

Where static serving is off (the app started from another folder, without the project's config), the page falls
back to st.plotly_chart, with the same figures and no drag-to-select.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from pipesim.charts import CRITICAL_COLOR, export

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"  # app_pages/parts/ -> the app's folder
# The plotly.js version the plotly package is built against (plotly.offline.get_plotlyjs_version()); a test checks.
PLOTLY_JS = export.PLOTLY_JS

# Streamlit's light theme for charts, in real colours: Streamlit's own "streamlit" template holds placeholders
# (#000001 ...) that only its plotly element replaces.
_GRID, _MUTED, _TEXT = "#e6e9ef", "#808495", "#31333F"
_AXIS = {
    "gridcolor": _GRID,
    "linecolor": _GRID,
    "zerolinecolor": _GRID,
    "automargin": True,
    "ticks": "",
    "ticklabelstandoff": 4,  # the x and y axes' "0" labels would touch at the origin
    "tickfont": {"color": _MUTED},
    "title": {"font": {"color": _MUTED}, "standoff": 10},
}
LIGHT_TEMPLATE = {
    "layout": {
        "colorway": [
            "#0068c9",
            "#83c9ff",
            "#ff2b2b",
            "#ffabab",
            "#29b09d",
            "#7defa1",
            "#ff8700",
            "#ffd16a",
            "#6d3fc0",
            "#d5dae5",
        ],
        "font": {"family": '"Source Sans", "Source Sans Pro", sans-serif', "color": _TEXT, "size": 12},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "title": {"font": {"size": 16, "weight": 600}, "x": 0, "xanchor": "left", "xref": "container", "pad": {"l": 4}},
        "xaxis": _AXIS,
        "yaxis": _AXIS,
        "hoverlabel": {"bgcolor": "white", "bordercolor": "#d5dae5", "font": {"color": _TEXT}},
        "legend": {"bgcolor": "rgba(0,0,0,0)"},
        "margin": {"t": 60, "l": 60, "r": 20, "b": 40},  # room for a y-axis title beside its ticks
    },
}

# plotly's options for every chart. No "responsive": the component resizes the chart whenever its container
# changes size (a ResizeObserver), which covers the window too.
CONFIG = {"displaylogo": False}

# Loads the bundle once per browser tab (a <script> tag: it is a UMD file that sets window.Plotly), then draws.
# Called on every rerun with the new figure; Plotly.react updates the same <div> in place.
_JS = """
let loading = null;
function loadPlotly(src) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!loading) loading = new Promise((resolve, reject) => {
    const script = document.createElement('script');
    script.src = src;
    script.onload = () => resolve(window.Plotly);
    script.onerror = () => { loading = null; reject(new Error('could not load ' + src)); };
    document.head.appendChild(script);
  });
  return loading;
}
// The full-screen button that Streamlit's own chart element has, as a modebar button: the chart takes the
// whole screen while full screen and its own size again after.
const FULL_SCREEN = {
  name: 'Full screen',
  icon: {width: 24, height: 24, path: 'M7 14H5v5h5v-2H7v-3zm-2-4h2V7h3V5H5v5zm12 7h-3v2h5v-5h-2v3zM14 5v2h3v3h2V5h-5z'},
  click: div => document.fullscreenElement ? document.exitFullscreen() : div.requestFullscreen(),
};
function followFullScreen(div, Plotly) {
  div.addEventListener('fullscreenchange', () => {
    const full = document.fullscreenElement === div;
    div.style.background = full ? getComputedStyle(appOf(div)).backgroundColor : '';
    Plotly.relayout(div, full ? {width: window.innerWidth, height: window.innerHeight}
                              : {width: null, height: div.pipesimHeight});  // null: the container's width again
  });
}
// LIGHT_TEMPLATE's colours for a page in Streamlit's dark theme (the browser's preference, or the menu's choice),
// read from the page's background each time the chart is drawn, and again whenever the theme changes.
const DARK = {
  text: '#FAFAFA', muted: '#A3A8B8', grid: '#3D4150', idle: '#4A4E5A', hover: '#262730', critical: '#FFE14D',
};
const CRITICAL = '__CRITICAL__';
const LIGHT_IDLE = '#E6E6E6';
function appOf(element) { return element.closest('[data-testid="stApp"]') || document.body; }
function onDarkPage(element) {
  const [r, g, b] = (getComputedStyle(appOf(element)).backgroundColor.match(/[0-9.]+/g) || [255, 255, 255])
    .map(Number);
  return 0.299 * r + 0.587 * g + 0.114 * b < 128;
}
function isWhite(color) { return color === 'white' || color === '#fff' || color === '#ffffff' || color === '#FFFFFF'; }
function darken(figure) {
  const layout = figure.layout;
  const t = layout.template.layout;
  t.font.color = t.hoverlabel.font.color = DARK.text;
  t.hoverlabel.bgcolor = DARK.hover;
  t.annotationdefaults = {font: {color: DARK.text}};
  for (const axis of [t.xaxis, t.yaxis]) {
    axis.gridcolor = axis.linecolor = axis.zerolinecolor = DARK.grid;
    axis.tickfont.color = axis.title.font.color = DARK.muted;
  }
  // figures that set a white plot area (pipesim's charts do, for exports) get the page's background instead
  for (const key of ['plot_bgcolor', 'paper_bgcolor']) if (isWhite(layout[key])) layout[key] = 'rgba(0,0,0,0)';
  for (const name of Object.keys(layout)) {  // the axes of subplots (xaxis2, yaxis3...) too
    if (/^[xy]axis[0-9]*$/.test(name) && layout[name]) {
      const axis = layout[name];
      axis.gridcolor = axis.gridcolor || DARK.grid;
      if (axis.title && axis.title.font && axis.title.font.color === undefined) axis.title.font.color = DARK.muted;
    }
  }
  for (const annotation of layout.annotations || []) {
    if (!annotation.font || !annotation.font.color) annotation.font = {...(annotation.font || {}), color: DARK.text};
  }
  for (const trace of figure.data) {  // idle bands: a dark grey on a dark page
    if (trace.marker && trace.marker.color === LIGHT_IDLE) trace.marker.color = DARK.idle;
    // the critical path (outlines, edges, rings, their legend swatches) is near-black: light on a dark page
    for (const part of [trace.line, trace.marker, trace.marker && trace.marker.line]) {
      if (part && part.color === CRITICAL) part.color = DARK.critical;
    }
  }
  return figure;
}
export default function ({ parentElement, data, setTriggerValue }) {
  let div = parentElement.querySelector(':scope > div.pipesim-plot');
  if (!div) {
    div = document.createElement('div');
    div.className = 'pipesim-plot';
    div.style.width = '100%';
    parentElement.appendChild(div);
  }
  div.pipesimSelect = data.select ? setTriggerValue : null;
  const pristine = data.figure;
  const config = {...data.config, modeBarButtonsToAdd: [FULL_SCREEN]};
  let current = true;
  let observer = null;
  let themeWatch = null;
  let dark = null;
  function draw(Plotly) {
    const figure = JSON.parse(pristine);
    dark = onDarkPage(parentElement);
    div.pipesimHeight = figure.layout.height || null;
    div.dataset.theme = dark ? 'dark' : 'light';
    if (figure.layout.template && dark) darken(figure);
    return Plotly.react(div, figure.data, figure.layout, config);
  }
  loadPlotly(data.src).then(Plotly => {
    if (!current) return;
    draw(Plotly).then(() => {
      if (!div.pipesimListening) {  // plotly keeps its handlers across Plotly.react
        div.pipesimListening = true;
        followFullScreen(div, Plotly);
        div.on('plotly_selected', event => {
          const range = event && event.range && event.range.x;
          if (div.pipesimSelect && range) div.pipesimSelect('select', range.map(Number));
        });
      }
    });
    observer = new ResizeObserver(() => { if (div._fullLayout) Plotly.Plots.resize(div); });
    observer.observe(parentElement);
    // A theme change (the menu's Settings, or the system's preference) restyles the app without a rerun: draw again.
    themeWatch = new MutationObserver(() => { if (current && onDarkPage(parentElement) !== dark) draw(Plotly); });
    themeWatch.observe(appOf(parentElement), {attributes: true, attributeFilter: ['class', 'style']});
  }).catch(error => { div.textContent = 'The chart could not be drawn: ' + error.message; });
  return () => {
    current = false;
    if (observer) observer.disconnect();
    if (themeWatch) themeWatch.disconnect();
  };
}
"""


@functools.cache
def _component() -> Callable:
    return st.components.v2.component(
        "pipesim_plot", js=_JS.replace("__CRITICAL__", CRITICAL_COLOR), isolate_styles=False
    )


def _static_url() -> str | None:
    """Where the browser finds the bundle, or None when the server does not serve static/ or the file is gone."""
    if not st.get_option("server.enableStaticServing") or not (STATIC_DIR / PLOTLY_JS).is_file():
        return None
    base = st.get_option("server.baseUrlPath").strip("/")
    return "/" + "/".join(part for part in (base, "app", "static", PLOTLY_JS) if part)


def figure_json(fig: go.Figure, select: bool = False) -> str:
    """The figure as plotly.js reads it, in the app's light theme (numpy arrays as typed arrays); with `select`,
    a drag selects a horizontal range instead of zooming. `fig` itself is left as it is (it may be cached)."""
    spec = fig.to_dict()
    spec["layout"]["template"] = LIGHT_TEMPLATE
    if select:
        spec["layout"].update(dragmode="select", selectdirection="h")
    return pio.to_json(spec, validate=False)


def styled(fig: go.Figure) -> go.Figure:
    """A copy of `fig` as the page shows it (the app's light template: its title, fonts, colours and margins), for
    an export that looks like the screen. `fig` itself is left as it is (it may be cached)."""
    copy = go.Figure(fig)
    copy.update_layout(template=LIGHT_TEMPLATE)
    return copy


def bundle_text() -> str | None:
    """The cartesian plotly.js bundle the app serves (static/), inlined into HTML exports instead of plotly's full
    bundle (1.4 MB against 4.6 MB); None when the file is gone (the export then inlines the full one). The
    command line's `--html` inlines the same (pipesim.charts.export.cartesian_bundle)."""
    return export.cartesian_bundle()


def show(fig: go.Figure, key: str, *, select: bool = False, on_select: Callable[[], None] | None = None) -> None:
    """Draw `fig` full width. With `select`, a horizontal drag selects an x range instead of zooming:
    `on_select` runs before the rerun it causes and reads the range with `selected_range(key)`."""
    src = _static_url()
    if src is None:
        st.plotly_chart(fig, key=key, config=CONFIG)
        return
    callbacks = {"on_select_change": on_select or (lambda: None)} if select else {}
    _component()(
        key=key, data={"figure": figure_json(fig, select), "src": src, "select": select, "config": CONFIG}, **callbacks
    )


def selected_range(key: str) -> tuple[float, float] | None:
    """The x range just dragged across chart `key` (in its `on_select` callback), or None."""
    picked = (st.session_state.get(key) or {}).get("select")  # a ComponentResult: a dict of its triggers
    if not picked or len(picked) != 2:
        return None
    start, end = sorted(float(x) for x in picked)
    return start, end
