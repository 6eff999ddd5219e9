"""The Plan page's model presets: a small model the executor trains on this machine in seconds (so Verify runs
here), and descriptions of a 7B-class and a 70B-class model on the devices they are usually planned for.

Plain data: each preset is the Plan form's widget values by key (the page sets them when a preset is picked,
the tour when it opens the page); the schedules searched are the registry's planned ones.
"""

from __future__ import annotations

from types import MappingProxyType

from pipesim.schedules import planned_schedule_names

CUSTOM = "(your own)"

PRESETS = MappingProxyType(
    {
        "small (runs here in seconds)": MappingProxyType(
            {
                "plan-layers": 4,
                "plan-hidden": 128,
                "plan-ffn": 512,
                "plan-heads": 4,
                "plan-seq-len": 64,
                "plan-vocab": 1000,
                "plan-dtype": "fp32",
                "plan-tflops": 0.01,
                "plan-devices": 2,
                "plan-batch": 16,
                "plan-cap": 0.0,
                "plan-optimizer": "sgd",
                "plan-schedules": list(planned_schedule_names()),
                "plan-mbs": "1,2,4",
                "plan-chunks": "2",
            }
        ),
        "7B-class on 8 GPUs": MappingProxyType(
            {
                "plan-layers": 32,
                "plan-hidden": 4096,
                "plan-ffn": 11008,
                "plan-heads": 32,
                "plan-seq-len": 4096,
                "plan-vocab": 32000,
                "plan-dtype": "bf16",
                "plan-tflops": 400.0,
                "plan-devices": 8,
                "plan-batch": 64,
                "plan-cap": 80.0,
                "plan-optimizer": "adam",
                "plan-schedules": list(planned_schedule_names()),
                "plan-mbs": "1,2",
                "plan-chunks": "2",
            }
        ),
        "70B-class on 32 GPUs": MappingProxyType(
            {
                "plan-layers": 80,
                "plan-hidden": 8192,
                "plan-ffn": 28672,
                "plan-heads": 64,
                "plan-seq-len": 4096,
                "plan-vocab": 32000,
                "plan-dtype": "bf16",
                "plan-tflops": 400.0,
                "plan-devices": 32,
                "plan-batch": 256,
                "plan-cap": 80.0,
                "plan-optimizer": "adam",
                "plan-schedules": list(planned_schedule_names()),
                "plan-mbs": "1",
                "plan-chunks": "2",
            }
        ),
    }
)
SMALL = next(iter(PRESETS))
# A link may name a preset by its label's first word (`?plan-preset=small`, `7b-class`) as well as by its label.
SHORT_KEYS = MappingProxyType({label.split(" ", 1)[0].lower(): label for label in PRESETS})


def label_of(value: str) -> str | None:
    """The preset a link's value names (its label or its short key), CUSTOM, or None for an unknown one."""
    if value in PRESETS or value == CUSTOM:
        return value
    return SHORT_KEYS.get(value.lower())


def apply_preset() -> None:
    """The preset's values into the form's fields (a callback: before the form is drawn)."""
    import streamlit as st

    values = PRESETS.get(st.session_state.get("plan-preset"))
    if values is not None:
        for key, value in values.items():
            st.session_state[key] = value
