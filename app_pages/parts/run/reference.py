"""The Run page's comparison with torch.distributed.pipelining's own run of the schedule, and the loss per step."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages.parts import plot
from pipesim.charts import attribution as charts_attribution


def show(result) -> None:
    """The reference run's median step beside ours (or why there is none), and both losses per step."""
    ref = result.reference
    losses = {"pipesim executor": result.losses}
    if ref is None:
        if result.config is not None and result.config.reference:
            st.info("No torch.distributed.pipelining reference was written.")
    elif ref.get("error"):
        st.warning(f"torch.distributed.pipelining reference unavailable: {ref['error']}")
    else:
        st.markdown(f"**torch.distributed.pipelining reference** ({ref.get('torch_schedule') or 'its schedule'})")
        times = ref.get("step_times_ms") or []
        ours = result.step_times_ms
        table = pd.DataFrame(
            {
                "": ["median step (ms)", "steps"],
                "pipesim executor": [float(pd.Series(ours).median()) if ours else None, len(ours)],
                "torch reference": [float(pd.Series(times).median()) if times else None, len(times)],
            }
        )
        st.dataframe(table, hide_index=True, width="stretch")
        losses["torch reference"] = ref.get("losses") or []
    if any(losses.values()):
        plot.show(charts_attribution.loss_figure(losses), "run-losses")
