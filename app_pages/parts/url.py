"""The app's URL settings: what each key may hold (one entry per bound widget, the ranges its widget takes), read
through pipesim.url_query before any page draws; a refused value is dropped (its widget shows the default) and
named, with the reason, in one notice on the page."""

from __future__ import annotations

from collections.abc import Iterable

import streamlit as st
from streamlit.runtime.state.session_state_proxy import get_session_state

from app_pages.parts import schedule_knobs as knobs
from app_pages.parts import state
from app_pages.parts.cost_inputs import COST_SOURCES
from app_pages.parts.plan import presets
from app_pages.parts.run.form import CNN_SIZES, TRANSFORMER_SIZES
from app_pages.parts.whatif import KINDS, KINDS_KEY, LINK_PATTERN, LINKS_KEY, MIN_FACTOR, SENSITIVITY_KEY, SLOW_KEY
from pipesim.api import OFFLOAD_MODES
from pipesim.cost import DTYPE_BYTES, MAX_FACTOR
from pipesim.ir import SEQ_CUTS
from pipesim.limits import MAX_STEPS, MAX_TIME_MS
from pipesim.numbers import shown
from pipesim.plan import OFFLOAD_CHOICES, SYNTHESIZED
from pipesim.schedules import schedule_names
from pipesim.url_query import UrlField, refused_values
from pipesim_executor.config import BACKENDS, DEVICES, DTYPES, MODEL_KINDS, OPTIMIZERS
from pipesim_executor.host.run_folder import MAX_NAME_CHARS

TEXT = UrlField("text")  # a choice among what a page finds (runs, cost files, candidates): the page checks it
TOGGLE = UrlField("bool")
# a run folder's name, as long as the executor lets one be (run_folder.check_name)
RUN_NAME = UrlField("text", max_chars=MAX_NAME_CHARS, pattern=r"[A-Za-z0-9_.\-]+")
LINK_LIST = UrlField("text", pattern=LINK_PATTERN, pattern_meaning="link delays A-B:MS, comma-separated")


def _int(low: int, high: int) -> UrlField:
    return UrlField("int", low, high)


def _float(low: float, high: float) -> UrlField:
    return UrlField("float", low, high)


def fields() -> dict[str, UrlField]:
    """Every key a page binds to the URL (tests check the pages' `bind=` widgets against it), with its range."""
    names = tuple(schedule_names())
    cost = state.COST
    model_ints = ("num_layers", "hidden_size", "ffn_size", "num_heads", "seq_len", "microbatch_size")
    return {
        # shared by every page (app_pages.parts.state, app_pages.parts.schedule_inputs, app_pages.parts.cost_inputs)
        state.SCHEDULE: UrlField("choice", choices=names),
        state.RANKS: _int(1, state.MAX_RANKS),
        state.MICROBATCHES: _int(1, state.MAX_MICROBATCHES),
        state.CHUNKS: _int(1, 16),
        f"{cost}-source": UrlField("choice", choices=COST_SOURCES),
        **{f"{cost}-{kind}": _float(0.0, 1e6) for kind in ("f", "b", "w", "comm", "stages-comm")},
        f"{cost}-act": _float(0.0, 1e9),
        f"{cost}-recompute": TOGGLE,
        **{f"{cost}-m-{name}": _int(1, 10**7) for name in model_ints},
        f"{cost}-m-dtype": UrlField("choice", choices=tuple(DTYPE_BYTES)),
        f"{cost}-m-tflops": _float(0.001, 1e5),
        f"{cost}-m-bw": _float(0.001, 1e5),
        f"{cost}-m-lat": _float(0.0, 1e4),
        f"{cost}-pick": TEXT,
        # the knobs of offload, sequence chunks and MoE (app_pages.parts.schedule_knobs)
        knobs.OFFLOAD: UrlField("choice", choices=OFFLOAD_MODES),
        knobs.HOST_GBPS: _float(0.0, 1e5),
        knobs.HOST_LATENCY: _float(0.0, 1e4),
        knobs.SEQ_CHUNKS: _int(1, knobs.MAX_SEQ_CHUNKS),
        knobs.SEQ_CUT: UrlField("choice", choices=SEQ_CUTS),
        knobs.ATTENTION: _float(0.0, 1.0),
        knobs.A2A: _float(0.0, 1e6),
        knobs.MOE_LAYERS: _int(1, knobs.MAX_MOE_LAYERS),
        # the what-if of Simulate and Compare (app_pages.parts.whatif): read strictly by the page too
        SLOW_KEY: UrlField("floats", MIN_FACTOR, MAX_FACTOR),
        KINDS_KEY: UrlField("choice", choices=KINDS),
        LINKS_KEY: LINK_LIST,
        SENSITIVITY_KEY: _float(1.0, MAX_FACTOR),
        # Simulate
        "synth": TOGGLE,
        "synth-limit": _int(1, 2 * state.MAX_RANKS),
        "synth-budget": _int(1, 30),
        "sim-critical": TOGGLE,
        "sim-color": TEXT,
        "sim-window": UrlField("float", 0.0, MAX_TIME_MS, many=2),
        # Compare, DAG
        "cmp-log": TOGGLE,
        "cmp-gantt-pick": UrlField("choice", choices=names),
        "cmp-schedules": UrlField("choice", choices=names, many=len(names)),
        "dag-origin": TEXT,
        "dag-critical": TOGGLE,
        # Plan
        "plan-preset": UrlField("choice", choices=(presets.CUSTOM, *presets.PRESETS, *presets.SHORT_KEYS)),
        "plan-selected": TEXT,
        "plan-top": _int(1, 10),
        "plan-steps": _int(1, 50),
        "plan-layers": _int(1, 512),
        "plan-hidden": _int(8, 65536),
        "plan-ffn": _int(8, 262144),
        "plan-heads": _int(1, 512),
        "plan-seq-len": _int(1, 1 << 20),
        "plan-vocab": _int(1, 1 << 22),
        "plan-dtype": UrlField("choice", choices=tuple(DTYPE_BYTES)),
        "plan-tflops": _float(0.001, 1e4),
        "plan-bandwidth": _float(1e-6, 1e6),
        "plan-latency": _float(0.0, 1e6),
        "plan-devices": _int(1, state.MAX_RANKS),
        "plan-batch": _int(1, 4096),
        "plan-cap": _float(0.0, 4096.0),
        "plan-optimizer": UrlField("choice", choices=OPTIMIZERS),
        "plan-offload": UrlField("choice", choices=OFFLOAD_CHOICES),
        "plan-schedules": UrlField("choice", choices=(*names, SYNTHESIZED), many=len(names) + 1),
        "plan-synth-budget": _float(0.5, 600.0),
        "plan-mbs": UrlField("ints", 1, 4096),
        "plan-chunks": UrlField("ints", 1, 16),
        "plan-recompute": UrlField("choice", choices=("off", "on", "both")),
        "plan-shares": UrlField("floats", 0.0, 1.0),
        "plan-jitter": _float(0.0, 100.0),
        "plan-calibrate": RUN_NAME,  # a run folder's name, as ?run= is
        "plan-profile": RUN_NAME,  # a profile's folder under the runs folder
        "plan-extrapolate": TOGGLE,
        "plan-rounds": _int(1, 10),
        "plan-balance-layers": UrlField("floats", 0.0, MAX_TIME_MS),
        "plan-balance-stages": _int(1, 512),
        # Run
        "run": RUN_NAME,
        "run-model": UrlField("choice", choices=MODEL_KINDS),
        "run-size": UrlField("choice", choices=tuple(dict.fromkeys([*TRANSFORMER_SIZES, *CNN_SIZES]))),
        "run-layers": _int(1, 256),
        "run-data-parallel": _int(1, 16),
        "run-dtype": UrlField("choice", choices=DTYPES),
        "run-batch": _int(1, 4096),
        "run-steps": _int(1, 1000),
        "run-warmup": _int(0, 100),
        "run-timeout": _int(10, 7200),
        "run-device": UrlField("choice", choices=DEVICES),
        "run-backend": UrlField("choice", choices=BACKENDS),
        "run-profile": TOGGLE,
        "run-reference": TOGGLE,
        "run-recompute": TOGGLE,
        "run-step": _int(0, MAX_STEPS),
        # Streamlit's own (an embedded app)
        "embed": TEXT,
        "embed_options": UrlField("text", many=16),
    }


def forget(keys: Iterable[str]) -> None:
    """Remove keys from the URL and from the values Streamlit seeds widgets with: a widget bound to the URL reads
    the values the page was loaded with (QueryParams' initial values), not the current ones, so deleting a key
    from st.query_params alone would still hand the widget the refused value. Streamlit has no public call for
    this; tests/test_app_url.py pins it, so a Streamlit that changes it fails there, not on a user's page."""
    with get_session_state().query_params() as params:
        for key in keys:
            params.remove_param(key)
            params._initial_query_params.pop(key, None)


def _replace(key: str, value: str) -> None:
    """Put `value` in the URL in place of `key`'s, for the widget bound to it too (its seed, as `forget`)."""
    with get_session_state().query_params() as params:
        params.set_with_no_forward_msg(key, value)
        params._initial_query_params[key] = [value]
    st.query_params[key] = value


# Keys a link may give in a short form: the function turns a value into the one its widget shows.
CANONICAL = {"plan-preset": presets.label_of}

CHECKED = "url-checked"  # session key: the URL the session was opened with has been read


def check_url() -> None:
    """Drop every URL value no page may use, before any widget reads it, and name each in one notice.

    Once per session: the link a session was opened with (a shared or reloaded URL; editing the address bar
    opens a new session). Later reruns carry what the user typed into the bound widgets, which each field checks
    and explains beside itself (app_pages.parts.fields), never silently reset to a default here."""
    if st.session_state.get(CHECKED):
        return
    st.session_state[CHECKED] = True
    query = {key: st.query_params.get_all(key) for key in list(st.query_params)}
    refused = refused_values(query, fields())
    for key, canonical in CANONICAL.items():
        value = st.query_params.get(key)
        if key not in refused and value is not None and (named := canonical(value)) not in (None, value):
            _replace(key, named)
    if not refused:
        return
    forget(refused)
    reasons = "; ".join(f"{shown(key, 40)}: {why}" for key, why in list(refused.items())[:10])
    more = f" (and {len(refused) - 10} more)" if len(refused) > 10 else ""
    st.warning(
        f"The link's settings were not all usable; these were left at their defaults: {reasons}{more}",
        icon=":material/link_off:",
    )
