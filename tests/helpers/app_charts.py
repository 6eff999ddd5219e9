"""The figures an AppTest run drew: pages draw charts through app_pages.parts.plot.show (a Streamlit component whose
data holds the figure's JSON), or st.plotly_chart where the server does not serve static files."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest


def chart_figures(at: AppTest) -> list[dict]:
    """Every chart's figure (plotly's JSON: data, layout), in page order."""
    figures = []
    for element in at.get("bidi_component"):
        if element.proto.component_name == "pipesim_plot":
            figures.append(json.loads(json.loads(element.proto.json)["figure"]))
    return figures + [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def chart_titles(at: AppTest) -> list[str]:
    return [figure["layout"]["title"]["text"] for figure in chart_figures(at)]
