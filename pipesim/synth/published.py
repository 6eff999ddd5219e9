"""The Zero Bubble paper's published profiles and bubble rates, and its bubble rate.

Source: Penghui Qi, Xinyi Wan, Guangxing Huang, Min Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024,
arXiv:2401.10241. `PROFILES` is Table 9 (Appendix D: profiled T_F, T_B, T_W and T_comm in ms on A100s, per
model, stage count p and microbatch count m); `BUBBLE_RATES` is Table 5 (Section 5.3: bubble rates computed
from those profiles for ZB-H1, ZB-H2 and the searched ZB-2p), copied as printed. `MODELS` holds Table 3's
hidden size h and attention heads a (sequence length s = 1024 for every model), which give Table 1's memory
per layer: B needs sb(34h + 5as) stashed (M_B, what F stashes), W keeps 32sbh of it (M_W).

The paper's definitions, matched here:

* bubble rate = (cost - m (T_F + T_B + T_W)) / cost, where cost is "the largest execution time of all
  stages": per stage, from the start of its first pass to the end of its last (Appendix G's objective
  max_i E(i,m,W) - E(i,1,F) + T(i,1,F)); the stages' start offsets (the ramp) are not counted, because
  without the optimizer's synchronisation (the paper's Section 4) consecutive steps overlap: synthesis's
  "span" objective, read off a timeline by `pipesim.synth.problem.longest_rank_span`;
* T_B is the paper's B: the input-gradient pass, pipesim's I; pipesim's full backward is T_B + T_W;
* T_comm delays a consumer on the next stage (E(i,j,F) >= E(i-1,j,F) + T_comm + T(i,j,F)) without
  occupying either device: pipesim's link latency;
* ZB-2p limits each stage's activations to 2p M_B (ZB-1p to p M_B; ZB-H1 peaks at p M_B, ZB-H2 at
  (2p - 1) M_B): pipesim's memory limit in microbatches' worth, 2p.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel
from pipesim.cost.stage import StageCost

SOURCE = "Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, arXiv:2401.10241, Tables 3, 5 and 9"
SEQUENCE_LENGTH = 1024  # Table 3, every model

# Table 3: model -> (hidden size h, attention heads a)
MODELS: dict[str, tuple[int, int]] = {"1.5B": (2304, 24), "6.2B": (4096, 32), "14.6B": (5120, 40), "28.3B": (6144, 48)}

# Table 9: (model, p, m) -> (T_F, T_B, T_W, T_comm) in ms
PROFILES: dict[tuple[str, int, int], tuple[float, float, float, float]] = {
    ("1.5B", 8, 24): (18.522, 18.086, 9.337, 0.601),
    ("1.5B", 8, 32): (18.513, 18.086, 9.331, 0.626),
    ("1.5B", 8, 64): (18.546, 18.097, 9.321, 0.762),
    ("6.2B", 8, 24): (29.718, 29.444, 19.927, 0.527),
    ("6.2B", 8, 32): (29.802, 29.428, 19.530, 0.577),
    ("6.2B", 8, 64): (29.935, 29.621, 19.388, 0.535),
    ("14.6B", 16, 48): (11.347, 11.248, 8.132, 0.377),
    ("14.6B", 16, 64): (11.307, 11.254, 8.101, 0.379),
    ("14.6B", 16, 128): (11.325, 11.308, 8.109, 0.378),
    ("28.3B", 32, 96): (10.419, 10.207, 7.715, 0.408),
    ("28.3B", 32, 128): (10.408, 10.204, 7.703, 0.408),
    ("28.3B", 32, 256): (10.402, 10.248, 7.698, 0.460),
}

# Table 5: (model, p, m) -> bubble rates of (1F1B, 1F1B-I, ZB-H1, ZB-H2, ZB-1p, ZB-2p)
BUBBLE_COLUMNS = ("1f1b", "1f1b-i", "zb-h1", "zb-h2", "zb-1p", "zb-2p")
BUBBLE_RATES: dict[tuple[str, int, int], tuple[float, ...]] = {
    ("1.5B", 8, 24): (0.2431, 0.1055, 0.1585, 0.1083, 0.1585, 0.0433),
    ("1.5B", 8, 32): (0.1985, 0.0818, 0.1242, 0.0837, 0.1242, 0.0039),
    ("1.5B", 8, 64): (0.1240, 0.0443, 0.0674, 0.0444, 0.0674, 0.0026),
    ("6.2B", 8, 24): (0.2347, 0.0808, 0.1323, 0.0698, 0.1323, 0.0029),
    ("6.2B", 8, 32): (0.1898, 0.0628, 0.1045, 0.0559, 0.1045, 0.0022),
    ("6.2B", 8, 64): (0.1091, 0.0320, 0.0554, 0.0294, 0.0554, 0.0010),
    ("14.6B", 16, 48): (0.2552, 0.1104, 0.1397, 0.0672, 0.1397, 0.0066),
    ("14.6B", 16, 64): (0.2082, 0.0852, 0.1088, 0.0516, 0.1088, 0.0054),
    ("14.6B", 16, 128): (0.1251, 0.0445, 0.0576, 0.0266, 0.0576, 0.0028),
    ("28.3B", 32, 96): (0.2646, 0.1493, 0.1421, 0.0641, 0.1421, 0.0038),
    ("28.3B", 32, 128): (0.2168, 0.1164, 0.1106, 0.0490, 0.1106, 0.0029),
    ("28.3B", 32, 256): (0.1352, 0.0624, 0.0594, 0.0257, 0.0594, 0.0018),
}


@dataclass(frozen=True)
class PublishedCase:
    """One row of Tables 5 and 9: a model at p stages and m microbatches."""

    model: str
    num_stages: int
    num_microbatches: int

    @property
    def times(self) -> tuple[float, float, float, float]:
        """(T_F, T_B, T_W, T_comm) in ms."""
        return PROFILES[(self.model, self.num_stages, self.num_microbatches)]

    def published(self, column: str) -> float:
        """The paper's bubble rate for one of BUBBLE_COLUMNS."""
        return BUBBLE_RATES[(self.model, self.num_stages, self.num_microbatches)][BUBBLE_COLUMNS.index(column)]

    @property
    def w_share(self) -> float:
        """M_W / M_B from Table 1: what W still needs after B, per microbatch's stash."""
        hidden, heads = MODELS[self.model]
        return 32 * hidden / (34 * hidden + 5 * heads * SEQUENCE_LENGTH)

    def cost(self) -> CostModel:
        """The profile as a pipesim cost model: one microbatch's stash is 1 (limits count microbatches)."""
        forward, backward_input, weight, comm = self.times
        stage = StageCost(
            forward_ms=forward,
            backward_ms=backward_input + weight,
            weight_ms=weight,
            activation_bytes=1.0,
            weight_grad_bytes=self.w_share,
            input_bytes=1.0,
        )
        return CostModel(stages=(stage,), links=(LinkCost(latency_ms=comm),))

    @property
    def label(self) -> str:
        return f"{self.model} p={self.num_stages} m={self.num_microbatches}"


CASES: tuple[PublishedCase, ...] = tuple(PublishedCase(*key) for key in PROFILES)


def paper_bubble_rate(cost_ms: float, case: PublishedCase) -> float:
    """(cost - m (T_F + T_B + T_W)) / cost, the paper's bubble rate."""
    forward, backward_input, weight, _ = case.times
    work = case.num_microbatches * (forward + backward_input + weight)
    return (cost_ms - work) / cost_ms if cost_ms > 0 else 0.0
