"""A measurement variant of app.py whose Simulate page is simulate_one_chart.py (see there); not part of the app."""

import streamlit as st

from app_pages import state

st.set_page_config(page_title="pipesim", page_icon=":material/view_timeline:", layout="wide")

PAGES = [
    st.Page("simulate_one_chart.py", title="Simulate", icon=":material/view_timeline:", default=True),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("app_pages/dag.py", title="DAG", icon=":material/account_tree:"),
    st.Page("app_pages/custom.py", title="Custom schedule", icon=":material/edit_note:"),
    st.Page("app_pages/run.py", title="Run", icon=":material/play_circle:"),
    st.Page("app_pages/plan.py", title="Plan", icon=":material/insights:"),
]

state.keep_settings()  # a page's settings outlive a visit to another page
st.navigation(PAGES).run()
