"""Typed configs of a real run, one per concern, shared by the launcher (parent) and the workers (torchrun ranks).

Each field's docstring is its help, and `python -m executor run`'s flags are generated from the fields
(pipesim.flags; a field's metadata names its flag where it is not the field's own name): the configs are the one
source of the flags, their defaults and their help. What the run folder holds is pipesim_executor.run_files'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from pipesim.cost.runtime import OPTIMIZERS
from pipesim.ir import SEQ_CUTS
from pipesim.limits import MAX_SEED, MAX_STEPS, MAX_TIMEOUT_S
from pipesim.numbers import check_number
from pipesim.schedules.sequence import check_seq_chunks
from pipesim.sim.offload import OFFLOAD_MODES, check_offload_mode
from pipesim_executor.model_config import (  # noqa: F401 - re-exported: the run's model section
    CUSTOM,
    IMAGE_SHAPE,
    MODEL_KINDS,
    NUM_CLASSES,
    SMALL_TRANSFORMER,
    SPEC_HELP,
    SPEC_PATTERN,
    TRANSFORMER_KINDS,
    CNNConfig,
    ModelConfig,
    MoEConfig,
    absolute_spec,
    check_model_file,
    check_positive,
    is_file_spec,
    parse_spec,
)
from pipesim_executor.stragglers_config import ComputeConfig, InjectConfig, check_stragglers

DTYPES = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl", "staged")
OptimizerName = Literal[OPTIMIZERS]  # type: ignore[valid-type]  # the flag's choices: pipesim's one list
OffloadMode = Literal[OFFLOAD_MODES]  # type: ignore[valid-type]  # pipesim.sim.offload's modes
SeqCut = Literal[SEQ_CUTS]  # type: ignore[valid-type]  # pipesim.ir's sequence cuts
SGD_MOMENTUM = 0.9  # sgd-momentum's momentum: one buffer per parameter, as the planner counts it
# Without --batch-size: the smallest multiple of the microbatches that is at least this.
DEFAULT_MIN_BATCH = 16


@dataclass(frozen=True)
class PipelineConfig:
    """The pipeline: a registered schedule (or a custom one's name) and its sizes."""

    schedule: str = field(default="1f1b", metadata={"metavar": "NAME"})
    """A registered schedule's name (python -m pipesim list)."""
    num_ranks: int = field(default=2, metadata={"flag": "ranks"})
    """Pipeline ranks: one process (one device) each."""
    num_microbatches: int = field(default=4, metadata={"flag": "microbatches"})
    """Microbatches per step: the batch is split into this many."""
    num_virtual_stages: int | None = field(default=None, metadata={"flag": "virtual-stages"})
    """Stages per rank, for the schedules that take a choice of it (interleaved, looped); default the schedule's
    own, 2."""
    data_parallel: int = 1
    """Replicas of the whole pipeline: ranks x this many processes, gradients all-reduced between replicas."""
    offload: OffloadMode = "none"
    """Activation offload (CPU runs): full moves every microbatch's saved activations whose backward is at least two
    actions after its forward to a host buffer after the forward and back before the backward, on a copy thread;
    selective only those worth the copies (pipesim.sim.offload places them)."""
    seq_chunks: int | None = field(default=None, metadata={"metavar": "S"})
    """Sequence chunks per microbatch, for the schedules that take them (seq1f1b; default 2): the built-in
    Transformer runs each microbatch as S pieces of its sequence, keeping the earlier pieces' keys and values."""
    seq_cut: SeqCut | None = None
    """How a microbatch's sequence is cut into chunks (seq1f1b; default even): even tokens, or balanced compute
    under causal attention (pipesim.cost.seq_chunks, with the model's attention share)."""

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, str) or not self.schedule.strip():
            raise ValueError(f"schedule must be a schedule name, got {self.schedule!r}")
        check_offload_mode(self.offload)
        check_positive("num_ranks", self.num_ranks)
        check_positive("data_parallel", self.data_parallel)
        check_positive("num_microbatches", self.num_microbatches)
        if self.num_virtual_stages is not None:
            check_positive("num_virtual_stages", self.num_virtual_stages)
        if self.seq_chunks is not None or self.seq_cut is not None:
            check_seq_chunks(1 if self.seq_chunks is None else self.seq_chunks, self.seq_cut or SEQ_CUTS[0])


@dataclass(frozen=True)
class TrainingConfig:
    """Training: batch, steps, optimizer, recomputation, precision, and the torch.profiler capture."""

    batch_size: int | None = None
    """Samples per step and per replica, split into the microbatches; with data parallel D the global batch is
    D times this (default: the smallest multiple of the microbatches that is at least 16)."""
    steps: int = 5
    """Measured steps."""
    warmup_steps: int = 1
    """Steps run before the measured ones, not measured."""
    seed: int = 0
    """Seed of the model's weights and of the synthetic data."""
    optimizer: OptimizerName = "sgd"
    """The optimizer: sgd, sgd-momentum (momentum 0.9: one buffer per parameter) or adam."""
    lr: float = 0.01
    """Learning rate."""
    recompute: bool = False
    """Recompute each stage's activations in its backward instead of stashing them."""
    torch_profile: bool = False
    """Record a torch.profiler (Kineto) trace of the measured steps on every rank (the run folder's traces/),
    actions labelled PP:<action> as torch labels them."""
    dtype: Literal["fp32", "bf16"] = "fp32"
    """Compute precision; bf16: forward and recompute under autocast, activations and their gradients sent in
    bf16, fp32 master weights, gradients and optimizer."""

    def __post_init__(self) -> None:
        if self.batch_size is not None:
            check_positive("batch_size", self.batch_size)
        if not isinstance(self.torch_profile, bool):
            raise ValueError(f"torch_profile must be true or false, got {self.torch_profile!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        check_number(self.steps, "steps", minimum=1, maximum=MAX_STEPS, whole=True)
        check_number(self.warmup_steps, "warmup_steps", minimum=0, maximum=MAX_STEPS, whole=True)
        check_number(self.seed, "seed", minimum=0, maximum=MAX_SEED, whole=True)  # torch's and numpy's range
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        number = isinstance(self.lr, (int, float)) and not isinstance(self.lr, bool)
        if not (number and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")


@dataclass(frozen=True)
class DeviceConfig:
    """Devices: where the ranks run and how they talk (resolved by pipesim_executor.devices)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """cpu, cuda, or auto: CUDA when torch sees GPUs, else CPU."""
    backend: Literal["auto", "gloo", "nccl", "staged"] = "auto"
    """Transport between ranks; auto: gloo on CPU, nccl with one GPU per rank, else staged through host memory."""

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; valid: {', '.join(DEVICES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; valid: {', '.join(BACKENDS)}")


@dataclass(frozen=True)
class NodesConfig:
    """Nodes: a multi-node run, passed through to torchrun's rendezvous (the same --out on every node)."""

    nnodes: int = 1
    """Nodes taking part."""
    node_rank: int = 0
    """This node's index, 0 to nnodes - 1; node 0 writes result.json."""
    rdzv_endpoint: str | None = field(default=None, metadata={"metavar": "HOST:PORT"})
    """torchrun's rendezvous endpoint, on node 0."""


@dataclass(frozen=True)
class RunConfig:
    """The run as a whole: a profile first, the torch reference, the time limit. One typed config per concern beside
    these; checked so bad input is refused before anything starts. Build it from flat keyword arguments with
    `run_config(...)`."""

    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    devices: DeviceConfig = field(default_factory=DeviceConfig)
    nodes: NodesConfig = field(default_factory=NodesConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    inject: InjectConfig = field(default_factory=InjectConfig)
    profile: bool = False
    """Measure each stage's costs first (cost.json), then predict the step time and compare."""
    reference: bool = False
    """Also run torch.distributed.pipelining's own schedule on the same model, for comparison."""
    timeout_s: float = field(default=600.0, metadata={"flag": "timeout", "metavar": "S"})
    """Seconds before every process of the run is ended (the reference run included)."""

    def __post_init__(self) -> None:
        microbatches = self.pipeline.num_microbatches
        if self.training.batch_size is None:  # the default: one that splits
            batch_size = -(-DEFAULT_MIN_BATCH // microbatches) * microbatches
            object.__setattr__(self, "training", replace(self.training, batch_size=batch_size))
        elif self.training.batch_size % microbatches:
            low = self.training.batch_size // microbatches * microbatches
            choices = " or ".join(str(b) for b in (low, low + microbatches) if b > 0)
            raise ValueError(
                f"batch_size {self.training.batch_size} does not split into {microbatches} microbatches; "
                f"choose a multiple of {microbatches}, e.g. {choices}"
            )
        check_number(self.timeout_s, "timeout_s", above=0, maximum=MAX_TIMEOUT_S)
        check_stragglers(self)  # --compute sleep and --inject against the rest of the run

    @property
    def microbatch_size(self) -> int:
        assert self.training.batch_size is not None  # resolved in __post_init__
        return self.training.batch_size // self.pipeline.num_microbatches

    def stage_split(self, num_stages: int) -> tuple[int, ...] | None:
        """Where this run cuts its model into `num_stages` stages (`ModelConfig.stage_split`)."""
        return self.model.stage_split(num_stages, self.microbatch_size, self.training.recompute)

    @property
    def world_size(self) -> int:
        """Processes of the run: every pipeline rank of every data-parallel replica."""
        return self.pipeline.num_ranks * self.pipeline.data_parallel

    def describe(self) -> str:
        """The run's settings in one line: what `runs show` prints and what the Run page says a running job does
        (beside the user's own form, which it never overwrites)."""
        model = "sleeping" if self.compute.sleeps else self.model.spec or self.model.kind
        return (
            f"{self.pipeline.schedule}, {self.pipeline.num_ranks} ranks, {self.pipeline.num_microbatches} "
            f"microbatches, {model} model, {self.devices.device}/{self.devices.backend}, "
            f"{self.pipeline.data_parallel} replica(s), {self.training.dtype}, {self.training.steps} steps"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Read config.json: the nested layout, or the flat one of run folders written before it."""
        if not isinstance(data, dict):
            raise ValueError(f"a run config must be a JSON object, got {type(data).__name__}")
        if any(key in data for key in _SECTIONS if key != "model"):
            known = set(_SECTIONS) | {"profile", "reference", "timeout_s"}
            unknown = set(data) - known
            if unknown:
                raise ValueError(f"unknown run config fields {sorted(unknown)}; valid: {sorted(known)}")
            flat = {k: v for k, v in data.items() if k not in _SECTIONS}
            for section in _SECTIONS:
                value = data.get(section) or {}
                if not isinstance(value, dict):
                    raise ValueError(f"run config: {section} must be an object, got {value!r}")
                flat.update(value) if section != "model" else flat.update(model=value)
            return run_config(**flat)
        return run_config(**data)


_SECTIONS = {
    "pipeline": PipelineConfig,
    "model": ModelConfig,
    "training": TrainingConfig,
    "devices": DeviceConfig,
    "nodes": NodesConfig,
    "compute": ComputeConfig,
    "inject": InjectConfig,
}
_FIELDS = {f.name: section for section, cls in _SECTIONS.items() if section != "model" for f in fields(cls)}


def run_config(*, model: ModelConfig | dict | None = None, **flat: Any) -> RunConfig:
    """A RunConfig from flat keyword arguments (schedule=..., num_ranks=..., batch_size=..., device=...),
    as the CLI, the app and the tests give them; unknown names are refused with the valid ones."""
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS if name != "model"}
    top: dict[str, Any] = {}
    for name, value in flat.items():
        if name in _FIELDS:
            sections[_FIELDS[name]][name] = value
        elif name in ("profile", "reference", "timeout_s"):
            top[name] = value
        else:
            valid = sorted([*_FIELDS, "model", "profile", "reference", "timeout_s"])
            raise ValueError(f"unknown run config field {name!r}; valid: {', '.join(valid)}")
    if model is not None and not isinstance(model, ModelConfig):
        model = ModelConfig.from_dict(model)
    built = {name: _SECTIONS[name](**values) for name, values in sections.items()}
    return RunConfig(model=model or ModelConfig(), **built, **top)


def check_split_points(split_points: Sequence[int], num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Explicit stage boundaries, checked by the one check that lives with the splitter
    (`pipesim.cost.balance.check_split_points`; the model description uses it too)."""
    from pipesim.cost.balance import check_split_points as check

    return check(split_points, num_layers, num_stages)


def ranks_per_node(config: RunConfig) -> int:
    """Processes per node: every pipeline rank of every data-parallel replica, shared out over the nodes."""
    return config.world_size // config.nodes.nnodes
