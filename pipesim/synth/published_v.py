"""What the controllable-memory paper's authors publish about V-Half, V-Min and V-ZB against 1F1B, as data.

Source: Penghui Qi, Xinyi Wan, Nyamdavaa Amar, Min Lin, "Pipeline Parallelism with Controllable Memory",
NeurIPS 2024, arXiv:2405.15362 ("reduce the peak activation memory to 1/2 of 1F1B without sacrificing efficiency,
and even to 1/3 with comparable throughput"). Two tables, copied as printed:

* `README_TABLE`: the comparison table of the authors' repository README (github.com/sail-sg/zero-bubble-pipeline-
  parallelism, commit 39f2c186), with its notes `README_NOTES`;
* `PLAYGROUND_TABLE`: the paper's playground (huggingface.co/spaces/sail/pipeline-parallelism-with-controllable-
  memory, description1.md), which states the memory exactly.

Their units, as pipesim measures them (tests/test_v_memory.py):

* bubble rate = 1 - (F+B+W) m / longest stage time, the Zero Bubble paper's (`published.paper_bubble_rate`): the
  longest time one rank takes from its first pass to its last (`pipesim.synth.problem.longest_rank_span`);
* activation memory "by #micro-batch": the peak, over ranks, of microbatches' worth of one 1F1B stage's
  activations, held from F until W frees them. A V rank holds two chunks of half a 1F1B stage each, so one such
  microbatch is two chunk stashes.
"""

from __future__ import annotations

SOURCE = (
    "Qi, Wan, Amar, Lin, Pipeline Parallelism with Controllable Memory, NeurIPS 2024, arXiv:2405.15362; "
    "tables of github.com/sail-sg/zero-bubble-pipeline-parallelism README.md and "
    "huggingface.co/spaces/sail/pipeline-parallelism-with-controllable-memory description1.md"
)

README_COLUMNS = ("1F1B", "ZB1P", "ZB2P", "ZBV", "V-Half", "V-Min")
README_TABLE: dict[str, tuple[str, ...]] = {
    "Bubble Rate": ("$(p-1)/(m+p-1)=B$", "$B/3$", "0", "0", "$B/2$", "$2B/3 + O(n) overhead$"),
    "Activation Memory <br> (Compared to 1F1B)": ("1x", "1x", "2x", "1x", "1/2x", "1/3x"),
    "Pipeline Communication Volume <br> (Compared to 1F1B)": ("1x", "1x", "1x", "2x", "2x", "2x"),
}
README_NOTES = (
    "* p: number of pipeline stages; m: number of microbatches",
    "* Assuming T<sub>F</sub> = T<sub>B</sub> = T<sub>W</sub>",
    "* Communication volume of DP and TP stays the same",
)

PLAYGROUND_COLUMNS = ("1F1B", "V-Min", "V-Half", "V-ZB")
PLAYGROUND_TABLE: dict[str, tuple[str, ...]] = {
    "Bubble Rate <br> (assuming T_F=T_B=T_W)": ("~ p/m", "~ 2p/3m", "~ p/ 2m", "0"),
    "Activation Memory <br> (by #micro-batch)": ("p", "(p+4)//3", "(p+2)//2", "p"),
}
PLAYGROUND_NOTE = "Bubble Rate here is calculated as `1 - (F+B+W)*m / longest_stage_time`."

# The pipesim family each column names (ZB1P and ZB2P are searched schedules pipesim does not build).
FAMILIES = {"1F1B": "1f1b", "ZBV": "zbv", "V-ZB": "zbv", "V-Half": "v-half", "V-Min": "v-min"}


def activation_memory(column: str, num_stages: int) -> int:
    """PLAYGROUND_TABLE's activation memory of `column` (one of PLAYGROUND_COLUMNS) at p = `num_stages`, in
    microbatches of one 1F1B stage."""
    p = num_stages
    return {"1F1B": p, "V-Min": (p + 4) // 3, "V-Half": (p + 2) // 2, "V-ZB": p}[column]


def bubble_rate(column: str, num_stages: int, num_microbatches: int) -> float:
    """README_TABLE's bubble rate of `column` (one of README_COLUMNS) at T_F = T_B = T_W, without V-Min's
    "O(n) overhead"."""
    p, m = num_stages, num_microbatches
    b = (p - 1) / (m + p - 1)
    return {"1F1B": b, "ZB1P": b / 3, "ZB2P": 0.0, "ZBV": 0.0, "V-Half": b / 2, "V-Min": 2 * b / 3}[column]
