import streamlit as st
from app_pages import state
st.set_page_config(page_title="pipesim", page_icon=":material/view_timeline:", layout="wide")
st.html('<script>import("/static/static/js/PlotlyChart.D9Z0_fxz.js")</script>', unsafe_allow_javascript=True)
PAGES = [
    st.Page("app_pages/simulate.py", title="Simulate", icon=":material/view_timeline:", default=True),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("app_pages/dag.py", title="DAG", icon=":material/account_tree:"),
    st.Page("app_pages/custom.py", title="Custom schedule", icon=":material/edit_note:"),
    st.Page("app_pages/run.py", title="Run", icon=":material/play_circle:"),
    st.Page("app_pages/plan.py", title="Plan", icon=":material/insights:"),
]
state.keep_settings()
st.navigation(PAGES).run()
