"""The Run page's stragglers: what the run injected (--inject, priced into its prediction) and what
`pipesim.analysis.stragglers` found in its measured steps (analysis.json) or in imported traces. Display only."""

from __future__ import annotations

import streamlit as st

from pipesim.analysis import describe
from pipesim.cost import Perturbation


def show(result) -> None:
    """An injection note (when the run had one), then the stragglers found, or that none was."""
    injection = Perturbation() if result.config is None else result.config.inject.perturbation()
    if injection:
        st.info(
            f"Injected: {injection.describe()}. The prediction prices the same slowdown.",
            icon=":material/speed:",
        )
    found = (result.analysis or {}).get("stragglers")
    if found is not None:
        show_found(found)


def show_found(found: dict, where: str = "the measured steps") -> None:
    """The stragglers and slow links found (`pipesim.analysis.stragglers`' document), one line each, or that none
    was."""
    st.markdown(f"**Stragglers found in {where}** (`pipesim stragglers`)")
    st.markdown("\n".join(f"- {line}" for line in describe(found)))
