"""DeepSeek's DualPipe README table, copied as data: per-device bubble, parameters and activations of 1F1B, ZB1P,
DualPipe and DualPipeV "based on the same number of PP stages" (deepseek-ai/DualPipe, README.md).

PP is the number of pipeline stages (even); F a forward chunk's time, B a full backward chunk's, W a
backward-for-weights chunk's, F&B two mutually overlapped forward and backward chunks. Activations are counted
in one stage's activations of one microbatch; parameters against 1F1B's per device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class PublishedRow(NamedTuple):
    method: str
    bubble: Callable[[int, float, float, float, float], float]  # (PP, F, B, W, F&B) -> per-device idle time
    bubble_text: str
    parameters_x: int
    activations: Callable[[int], int]  # PP -> activations per device
    devices: Callable[[int], int]  # PP -> devices


DUALPIPE_TABLE: tuple[PublishedRow, ...] = (
    PublishedRow("1F1B", lambda pp, f, b, w, fb: (pp - 1) * (f + b), "(PP-1)(F+B)", 1, lambda pp: pp, lambda pp: pp),
    PublishedRow(
        "ZB1P", lambda pp, f, b, w, fb: (pp - 1) * (f + b - 2 * w), "(PP-1)(F+B-2W)", 1, lambda pp: pp, lambda pp: pp
    ),
    PublishedRow(
        "DualPipe",
        lambda pp, f, b, w, fb: (pp / 2 - 1) * (fb + b - 3 * w),
        "(PP/2-1)(F&B+B-3W)",
        2,
        lambda pp: pp + 1,
        lambda pp: pp,
    ),
    PublishedRow(
        "DualPipeV",
        lambda pp, f, b, w, fb: (pp / 2 - 1) * (fb + b - 3 * w),
        "(PP/2-1)(F&B+B-3W)",
        2,
        lambda pp: pp + 1,
        lambda pp: pp // 2,
    ),
)
PIPESIM_NAME = {"1F1B": "1f1b", "ZB1P": "zb-h1", "DualPipe": "dualpipe", "DualPipeV": "dualpipev"}
