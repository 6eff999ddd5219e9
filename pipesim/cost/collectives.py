"""What collectives cost, from a link's latency and bandwidth: all-reduce, all-gather, reduce-scatter; and
the data-parallel group that prices a pipeline's gradient reduction and torch's per-stage collectives
(REDUCE_GRAD, UNSHARD, RESHARD) with them (`DataParallelGroup`).

The ring algorithms (what gloo and NCCL use for large messages), over `p` participants joined by links of
latency `a` (ms) and bandwidth `bw` (GB/s), for a message of `n` bytes:

* reduce-scatter of an `n`-byte input (each ends with n/p reduced bytes): p-1 steps, each moving n/p bytes:
  (p-1) a + (p-1)/p n / bw;
* all-gather to an `n`-byte output (each contributes n/p bytes): the same, (p-1) a + (p-1)/p n / bw;
* all-reduce of `n` bytes = reduce-scatter then all-gather: 2(p-1) a + 2(p-1)/p n / bw.

One participant costs nothing. These are the closed forms of the classic analysis (Thakur, Rabenseifner and
Gropp, "Optimization of collective communication operations in MPICH", 2005); the tests check them.

Bucketing (what DDP does: gradients are reduced in buckets of at most `bucket_bytes`, each its own collective)
pays the latency once per bucket. `fit_ring_link` turns two timed all-reduces (a tiny and a real-sized one)
back into the link that explains them, as pipesim_executor.rank.profile measures it.

torch's per-stage collectives, on a stage's `param_bytes`: REDUCE_GRAD is the bucketed all-reduce (a reduce-scatter
when the parameters are sharded, FSDP), UNSHARD an all-gather when sharded; nothing is moved with one replica, for
UNSHARD when nothing is sharded, and for RESHARD always. Transfers between pipeline stages (SEND/RECV) are the
links' business (`pipesim.cost.links.LinkCost`), not this module's.

Pure functions; times in ms, sizes in bytes, bandwidth in GB/s (10^9 bytes/s), as everywhere in pipesim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.cost.links import LinkCost
from pipesim.ir import CommKind
from pipesim.limits import MAX_BYTES, check_sizes

# DDP's default bucket cap (torch.nn.parallel.DistributedDataParallel bucket_cap_mb=25).
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024


def _check(num_bytes: float, participants: int) -> None:
    if isinstance(participants, bool) or not isinstance(participants, int) or participants < 1:
        raise ValueError(f"participants must be a positive integer, got {participants!r}")
    if not (isinstance(num_bytes, (int, float)) and 0 <= num_bytes <= MAX_BYTES):
        raise ValueError(f"bytes must be a number from 0 to {MAX_BYTES:g} (pipesim/limits.py), got {num_bytes!r}")


def _ring(num_bytes: float, participants: int, link: LinkCost, passes: int) -> float:
    """`passes` ring passes of p-1 steps, each step moving num_bytes / p over one link."""
    _check(num_bytes, participants)
    if participants == 1:
        return 0.0
    steps = passes * (participants - 1)
    per_step_bytes = num_bytes / participants
    return steps * link.transfer_ms(per_step_bytes)


def allreduce_ms(num_bytes: float, participants: int, link: LinkCost) -> float:
    """Ring all-reduce of `num_bytes` (every participant ends with the reduced whole): 2(p-1) a + 2(p-1)/p n/bw."""
    return _ring(num_bytes, participants, link, passes=2)


def allgather_ms(num_bytes: float, participants: int, link: LinkCost) -> float:
    """Ring all-gather to `num_bytes` in total (each contributes num_bytes / p): (p-1) a + (p-1)/p n/bw."""
    return _ring(num_bytes, participants, link, passes=1)


def reduce_scatter_ms(num_bytes: float, participants: int, link: LinkCost) -> float:
    """Ring reduce-scatter of a `num_bytes` input (each ends with its reduced num_bytes / p): as all-gather."""
    return _ring(num_bytes, participants, link, passes=1)


def bucket_sizes(num_bytes: float, bucket_bytes: float = DEFAULT_BUCKET_BYTES) -> list[float]:
    """The buckets `num_bytes` of gradients go out in: full buckets, then the rest (none for 0 bytes)."""
    if not bucket_bytes > 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes!r}")
    full, rest = divmod(float(num_bytes), float(bucket_bytes))
    return [float(bucket_bytes)] * int(full) + ([rest] if rest > 0 else [])


def bucketed_allreduce_ms(
    num_bytes: float, participants: int, link: LinkCost, bucket_bytes: float = DEFAULT_BUCKET_BYTES
) -> float:
    """All-reduce of `num_bytes` in buckets, one after the other: the latency term is paid per bucket.

    The full buckets are counted, not listed (`bucket_sizes`): any number of bytes prices in constant time."""
    _check(num_bytes, participants)
    if not bucket_bytes > 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes!r}")
    full, rest = divmod(float(num_bytes), float(bucket_bytes))
    whole = full * allreduce_ms(float(bucket_bytes), participants, link) if full else 0.0
    return whole + (allreduce_ms(rest, participants, link) if rest > 0 else 0.0)


def fit_ring_link(
    small_bytes: float, small_ms: float, large_bytes: float, large_ms: float, participants: int
) -> LinkCost:
    """The link whose ring all-reduce takes `small_ms` for `small_bytes` and `large_ms` for `large_bytes`.

    Inverts allreduce_ms through the two points; the large size's time is reproduced exactly. Where the
    larger message was not slower (noise, or sizes too close), the link is latency only.
    """
    if participants < 2:
        return LinkCost()
    steps = 2 * (participants - 1)
    fraction = steps / participants  # bytes-over-bandwidth multiplier of the ring all-reduce
    extra = (large_bytes - small_bytes) * fraction
    if large_ms <= small_ms or extra <= 0:
        return LinkCost(latency_ms=max(large_ms, 0.0) / steps)
    bandwidth = extra / ((large_ms - small_ms) * 1e-3) / 1e9
    latency = (small_ms - small_bytes * fraction / (bandwidth * 1e9) * 1e3) / steps
    return LinkCost(latency_ms=max(latency, 0.0), bandwidth_gbps=bandwidth)


@dataclass(frozen=True)
class DataParallelGroup:
    """The data-parallel group around a pipeline, described once: the cost model's third concern.

    `replicas` copies of every stage train together, joined by a ring over `link` (latency per step, bandwidth);
    `sharded` is FSDP (parameters sharded across the replicas); gradients go out in buckets of at most
    `bucket_bytes` (DDP's default, which the executor's grad sync uses too), each its own all-reduce. Every
    price of the group's collectives comes from here: the executor's all-reduce after a stage's last backward
    (`pipesim.sim.data_parallel`) and torch's REDUCE_GRAD, UNSHARD and RESHARD where a schedule states them.
    Which of those a step pays is decided in one place, `pipesim.sim.data_parallel.reduction_charge`.
    """

    replicas: int = 1
    link: LinkCost = LinkCost()
    sharded: bool = False
    bucket_bytes: float = DEFAULT_BUCKET_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"data_parallel (the replicas) must be a whole number >= 1, got {self.replicas!r}")
        check_sizes(num_replicas=self.replicas)  # bounded, so the ring formulas stay finite
        if not isinstance(self.link, LinkCost):
            raise ValueError(f"the data-parallel link must be a LinkCost, got {self.link!r}")
        if not isinstance(self.sharded, bool):
            raise ValueError(f"sharded must be true or false, got {self.sharded!r}")
        bucket = self.bucket_bytes
        if isinstance(bucket, bool) or not isinstance(bucket, (int, float)) or not (1 <= bucket < math.inf):
            raise ValueError(f"bucket_bytes must be a finite number of bytes, at least 1, got {bucket!r}")

    def grad_allreduce_ms(self, grad_bytes: float) -> float:
        """The one price of reducing `grad_bytes` of gradients across the replicas: a ring all-reduce per
        bucket, the buckets one after the other (0 with one replica, and for no bytes: nothing goes out)."""
        return bucketed_allreduce_ms(grad_bytes, self.replicas, self.link, self.bucket_bytes)

    def collective_ms(self, kind: CommKind, param_bytes: float) -> float:
        """Time of torch's per-stage collective `kind` over a stage holding `param_bytes` of parameters:
        REDUCE_GRAD is the gradient all-reduce (`grad_allreduce_ms`), a reduce-scatter when sharded; UNSHARD
        an all-gather when sharded; RESHARD frees memory and moves nothing."""
        if self.replicas == 1 or kind is CommKind.RESHARD:
            return 0.0
        if kind is CommKind.UNSHARD:
            return allgather_ms(param_bytes, self.replicas, self.link) if self.sharded else 0.0
        if kind is CommKind.REDUCE_GRAD:
            if self.sharded:
                return reduce_scatter_ms(param_bytes, self.replicas, self.link)
            return self.grad_allreduce_ms(param_bytes)
        return 0.0  # sends and receives: priced per stage boundary by the links
