"""pipesim in the browser: `streamlit run app.py`.

Navigation only. Each page lives in app_pages/ and draws widgets, builds a config,
calls pipesim or the executor and shows pipesim.charts figures.
"""

from pathlib import Path

import streamlit as st

from app_pages.parts import guide, state, url

# A local icon: a Material one (":material/...:") as the page icon makes the browser fetch it from
# fonts.gstatic.com, which fails offline (the pages' own Material icons come from Streamlit's bundled font).
FAVICON = Path(__file__).resolve().parent / "static" / "favicon.png"
st.set_page_config(page_title="pipesim", page_icon=FAVICON, layout="wide")

PAGES = [
    st.Page("app_pages/simulate.py", title="Simulate", icon=":material/view_timeline:", default=True),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("app_pages/dag.py", title="DAG", icon=":material/account_tree:"),
    st.Page("app_pages/custom.py", title="Custom schedule", icon=":material/edit_note:"),
    st.Page("app_pages/plan.py", title="Plan", icon=":material/insights:"),
    st.Page("app_pages/run.py", title="Run", icon=":material/play_circle:"),
]

state.keep_settings()  # a page's settings outlive a visit to another page
page = st.navigation(PAGES)
url.check_url()  # a link's values, read strictly before any widget is drawn from them
guide.glossary()
page.run()
