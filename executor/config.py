"""Typed configs of a real run, shared by the launcher (parent) and the workers (torchrun ranks).

The run folder is the contract between them:

    runs/NAME/
      config.json      RunConfig.to_dict()            (launcher writes, workers read)
      schedule.json    pipesim.formats schedule doc   (launcher writes, workers read)
      measured.json    measured Timeline doc + step_times_ms, losses, peak_memory_bytes (rank 0 writes;
                       with data parallelism, replica 0's ranks)
      cost.json        pipesim cost file from the profile phase (rank 0 writes, with --profile)
      reference.json   torch.distributed.pipelining step times and losses (with --reference)
      trace.json       Chrome trace: simulated and measured step, flows per message (launcher writes)
      traces/          torch.profiler (Kineto) traces of the measured steps, rankR.json and, from the
                       reference run, torch-rankR.json (with --torch-profile)
      result.json      status, message, timings, prediction error (launcher writes last)
      progress.json    the launcher's pid, progress, latest events and log lines (launcher, while it runs)
      cancel           written by whoever cancels the run; the launcher watches for it
      logs/            one log per rank

Workers report progress on stdout as single lines `PIPESIM {json}` (see
`PROGRESS_PREFIX`), e.g. {"event": "step", "rank": 0, "step": 3, "steps": 10}.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

PROGRESS_PREFIX = "PIPESIM "
TRACES_DIR = "traces"  # the run folder's torch.profiler traces (executor.torch_profile writes them)
# A file the launcher writes into the run folder to ask the ranks to stop after the step in progress and write
# what they measured (a cancel); the ranks agree on it at each step boundary.
STOP_FILE = "stop"
# A file anyone may write into the run folder to cancel the run (`python -m executor cancel`, the app of another
# server): the launcher's watch loop takes it as its own cancel (executor.launch, executor.watch).
CANCEL_FILE = "cancel"
# The launcher's view of its run, rewritten atomically about every PROGRESS_EVERY_S while it runs: its pid, the
# progress fraction, the latest events and log lines (executor.run_folder writes and reads it).
PROGRESS_FILE = "progress.json"
PROGRESS_EVERY_S = 0.5
MODEL_KINDS = ("transformer", "cnn")  # the built-in models; "custom" is a user's factory (ModelConfig.spec)
CUSTOM = "custom"
DTYPES = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl", "staged")
OPTIMIZERS = ("sgd", "adam")


# dotted module path, a colon, a function name: nothing else can reach importlib
SPEC_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
SPEC_HELP = "package.module:factory, e.g. examples.gpt_small:build"


def parse_spec(spec: object) -> tuple[str, str]:
    """(module, function) of a spec; ValueError naming the expected form otherwise."""
    if not isinstance(spec, str) or len(spec) > 300 or not SPEC_PATTERN.fullmatch(spec):
        raise ValueError(f"model spec must look like {SPEC_HELP}, got {spec!r}")
    module, function = spec.split(":")
    return module, function


@dataclass(frozen=True)
class ModelConfig:
    """The reference model and its size. Transformer fields and CNN fields are separate.

    kind "custom" is the user's own model: `spec` names its factory as "package.module:function"
    (executor.custom_model says what the factory returns); the size fields do not apply to it.
    """

    kind: Literal["transformer", "cnn", "custom"] = "transformer"
    spec: str | None = None
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
        if self.kind not in (*MODEL_KINDS, CUSTOM):
            raise ValueError(f"unknown model {self.kind!r}; valid: {', '.join(MODEL_KINDS)} or package.module:factory")
        if (self.kind == CUSTOM) != (self.spec is not None):
            raise ValueError("a custom model needs spec 'package.module:factory', and only a custom model takes one")
        if self.spec is not None:
            parse_spec(self.spec)  # the text form only; importing waits for executor.checks
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                raise ValueError(f"{f.name} must be a positive integer, got {value}")
        if self.kind == "transformer" and self.d_model % self.num_heads:
            raise ValueError(f"d_model {self.d_model} must be divisible by num_heads {self.num_heads}")

    @property
    def num_units(self) -> int:
        """Layers that stages share out (executor.model builds exactly these): a Transformer's embedding,
        num_layers blocks and output projection; a CNN's cnn_blocks conv blocks and 3 FC layers. A custom model's
        count is known once its factory ran (executor.custom_model.check_custom_model)."""
        if self.kind == CUSTOM:
            raise ValueError("a custom model's layers are counted by running its factory (executor.checks)")
        return self.num_layers + 2 if self.kind == "transformer" else self.cnn_blocks + 3

    def describe_units(self) -> str:
        if self.kind == CUSTOM:
            return f"the layers of {self.spec}"
        if self.kind == "transformer":
            return f"embedding + {self.num_layers} blocks + output"
        return f"{self.cnn_blocks} conv blocks + 3 FC layers"


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class PipelineConfig:
    """What runs: a registered schedule (or a custom one's name) and its sizes."""

    schedule: str = "1f1b"
    num_ranks: int = 2
    num_microbatches: int = 4
    num_virtual_stages: int | None = None
    # Replicas of the whole pipeline (data parallel): num_ranks x data_parallel processes in all.
    data_parallel: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, str) or not self.schedule.strip():
            raise ValueError(f"schedule must be a schedule name, got {self.schedule!r}")
        _positive_int("num_ranks", self.num_ranks)
        _positive_int("data_parallel", self.data_parallel)
        _positive_int("num_microbatches", self.num_microbatches)
        if self.num_virtual_stages is not None:
            _positive_int("num_virtual_stages", self.num_virtual_stages)


@dataclass(frozen=True)
class TrainingConfig:
    """How the model trains: batch, steps, optimizer, recomputation, precision; and whether torch.profiler records
    the measured steps (Kineto traces in the run folder's traces/, actions labelled PP:<action> as torch labels
    them)."""

    # Per step and per pipeline replica, split into num_microbatches; with data_parallel D the global batch is
    # batch_size x D, replica d taking rows d*batch_size..(d+1)*batch_size-1 of it.
    batch_size: int = 16
    steps: int = 5  # measured steps
    warmup_steps: int = 1  # not measured
    seed: int = 0
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = 0.01
    recompute: bool = False
    torch_profile: bool = False
    # Compute precision: "bf16" runs forward (and recompute) under torch.autocast with bfloat16 and sends
    # activations and their gradients between ranks in bfloat16; weights, gradients and the optimizer stay fp32.
    dtype: Literal["fp32", "bf16"] = "fp32"

    def __post_init__(self) -> None:
        _positive_int("batch_size", self.batch_size)
        if not isinstance(self.torch_profile, bool):
            raise ValueError(f"torch_profile must be true or false, got {self.torch_profile!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        _positive_int("steps", self.steps)
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        number = isinstance(self.lr, (int, float)) and not isinstance(self.lr, bool)
        if not (number and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")


@dataclass(frozen=True)
class DeviceConfig:
    """Where it runs: cpu, cuda or auto, and the transport between ranks (resolved by executor.devices)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: Literal["auto", "gloo", "nccl", "staged"] = "auto"

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; valid: {', '.join(DEVICES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; valid: {', '.join(BACKENDS)}")


@dataclass(frozen=True)
class NodesConfig:
    """Multi-node runs: passed through to torchrun's rendezvous."""

    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, one typed config per concern; checked so bad input is refused before anything
    starts. Build it from flat keyword arguments with `run_config(...)`."""

    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    devices: DeviceConfig = field(default_factory=DeviceConfig)
    nodes: NodesConfig = field(default_factory=NodesConfig)
    profile: bool = False  # measure per-stage costs first, write cost.json, predict
    reference: bool = False  # also run torch.distributed.pipelining's own schedule
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.training.batch_size % self.pipeline.num_microbatches:
            raise ValueError(
                f"batch_size {self.training.batch_size} does not split into {self.pipeline.num_microbatches} "
                f"microbatches; choose a batch size that is a multiple of {self.pipeline.num_microbatches}"
            )
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s!r}")

    @property
    def microbatch_size(self) -> int:
        return self.training.batch_size // self.pipeline.num_microbatches

    @property
    def world_size(self) -> int:
        """Processes of the run: every pipeline rank of every data-parallel replica."""
        return self.pipeline.num_ranks * self.pipeline.data_parallel

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
    if isinstance(model, dict):
        model = dict(model)
        if model.get("split_points") is not None:
            model["split_points"] = tuple(model["split_points"])
        valid = sorted(f.name for f in fields(ModelConfig))
        unknown = set(model) - set(valid)
        if unknown:
            raise ValueError(f"unknown model fields {sorted(unknown)}; valid: {valid}")
        model = ModelConfig(**model)
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
