"""Typed configs of a real run, shared by the launcher (parent) and the workers (torchrun ranks).

The run folder is the contract between them:

    runs/NAME/
      config.json      RunConfig.to_dict()            (launcher writes, workers read)
      schedule.json    pipesim.formats schedule doc   (launcher writes, workers read)
      measured.json    measured Timeline doc + step_times_ms, losses, peak_memory_bytes (rank 0 writes)
      cost.json        pipesim cost file from the profile phase (rank 0 writes, with --profile)
      reference.json   torch.distributed.pipelining step times and losses (with --reference)
      result.json      status, message, timings, prediction error (launcher writes last)
      logs/            one log per rank

Workers report progress on stdout as single lines `PIPESIM {json}` (see
`PROGRESS_PREFIX`), e.g. {"event": "step", "rank": 0, "step": 3, "steps": 10}.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

PROGRESS_PREFIX = "PIPESIM "
MODEL_KINDS = ("transformer", "cnn")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl", "staged")
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class ModelConfig:
    """The reference model and its size. Transformer fields and CNN fields are separate."""

    kind: Literal["transformer", "cnn"] = "transformer"
    # Transformer (the classic PyTorch tutorial model)
    vocab_size: int = 1000
    d_model: int = 128
    num_heads: int = 4
    ffn_size: int = 512
    num_layers: int = 4
    seq_len: int = 64
    # CNN (the classic CIFAR-10 examples): 3x32x32 images, 10 classes
    cnn_channels: int = 32
    cnn_blocks: int = 4
    cnn_fc_size: int = 256
    # Explicit stage boundaries as layer indices; None balances by parameter count.
    split_points: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"unknown model {self.kind!r}; valid: {', '.join(MODEL_KINDS)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                raise ValueError(f"{f.name} must be a positive integer, got {value}")
        if self.kind == "transformer" and self.d_model % self.num_heads:
            raise ValueError(f"d_model {self.d_model} must be divisible by num_heads {self.num_heads}")

    @property
    def num_units(self) -> int:
        """Layers that stages share out (executor.model builds exactly these): a Transformer's embedding,
        num_layers blocks and output projection; a CNN's cnn_blocks conv blocks and 3 FC layers."""
        return self.num_layers + 2 if self.kind == "transformer" else self.cnn_blocks + 3

    def describe_units(self) -> str:
        if self.kind == "transformer":
            return f"embedding + {self.num_layers} blocks + output"
        return f"{self.cnn_blocks} conv blocks + 3 FC layers"


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs; checked here so bad input is refused before anything starts."""

    schedule: str = "1f1b"
    num_ranks: int = 2
    num_microbatches: int = 4
    num_virtual_stages: int | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    batch_size: int = 16  # per step, split into num_microbatches
    steps: int = 5  # measured steps
    warmup_steps: int = 1  # not measured
    seed: int = 0
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = 0.01
    recompute: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: Literal["auto", "gloo", "nccl", "staged"] = "auto"
    profile: bool = False  # measure per-stage costs first, write cost.json, predict
    reference: bool = False  # also run torch.distributed.pipelining's own schedule
    timeout_s: float = 600.0
    # Multi-node: passed through to torchrun.
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):  # from JSON
            model = dict(self.model)
            if model.get("split_points") is not None:
                model["split_points"] = tuple(model["split_points"])
            object.__setattr__(self, "model", ModelConfig(**model))
        if self.num_ranks < 1:
            raise ValueError(f"num_ranks must be at least 1, got {self.num_ranks}")
        if self.num_microbatches < 1:
            raise ValueError(f"num_microbatches must be at least 1, got {self.num_microbatches}")
        if self.batch_size % self.num_microbatches:
            raise ValueError(
                f"batch_size {self.batch_size} does not split into {self.num_microbatches} microbatches; "
                f"choose a batch size that is a multiple of {self.num_microbatches}"
            )
        if self.steps < 1 or self.warmup_steps < 0:
            raise ValueError("steps must be >= 1 and warmup_steps >= 0")
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; valid: {', '.join(DEVICES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; valid: {', '.join(BACKENDS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")

    @property
    def microbatch_size(self) -> int:
        return self.batch_size // self.num_microbatches

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown run config fields {sorted(unknown)}; valid: {sorted(known)}")
        return cls(**data)


def check_split_points(split_points: Sequence[int], num_layers: int, num_stages: int) -> tuple[int, ...]:
    """The one check of explicit stage boundaries (layer indices where a stage starts), for the launcher and
    for the ranks that cut the model."""
    points = tuple(int(p) for p in split_points)
    if len(points) != num_stages - 1:
        raise ValueError(
            f"split_points {list(points)} give {len(points) + 1} stages but the schedule has {num_stages}: "
            f"give {num_stages - 1} layer indices"
        )
    previous = 0
    for point in points:
        if not previous < point < num_layers:
            raise ValueError(
                f"split_points {list(points)} must increase strictly and lie in 1..{num_layers - 1} "
                f"(the model has {num_layers} layers); every stage needs at least one layer"
            )
        previous = point
    return points
