"""The model of a real run (`ModelConfig`): the built-in Transformer or CNN (`CNNConfig`) and its sizes, or a
user's factory (`--model package.module:factory`, checked by a pattern before anything is imported), and where its
stages start. Its fields' docstrings are `executor run`'s model flags (pipesim.flags), as the other configs'
(pipesim_executor.config, which re-exports these names).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from pipesim.cost.shape import TransformerShape
from pipesim.limits import MAX_LAYERS

MODEL_KINDS = ("transformer", "cnn", "moe")  # the built-in models; "custom" is a user's factory (ModelConfig.spec)
TRANSFORMER_KINDS = ("transformer", "moe")  # the built-in models sized by a TransformerShape
CUSTOM = "custom"
# The executor's Transformer: small enough that a CPU run takes seconds (the classic PyTorch tutorial model).
SMALL_TRANSFORMER = TransformerShape(
    num_layers=4, hidden_size=128, ffn_size=512, num_heads=4, seq_len=64, vocab_size=1000
)


NUM_CLASSES = 10  # the CNN's classes and pictures (CIFAR-10's)
IMAGE_SHAPE = (3, 32, 32)

# dotted module path, a colon, a function name: nothing else can reach importlib
SPEC_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
_FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SPEC_HELP = (
    "package.module:factory (imported from the folder you run from, e.g. pipesim_examples.gpt_small:build) "
    "or path/to/file.py:factory"
)
MAX_EXPERTS = 1024  # experts per block: every rank builds them all before keeping its own
MAX_SPEC_CHARS = 4096  # a file path's length, with room for deep folders


def is_file_spec(module: str) -> bool:
    """Whether a spec's part before the colon names a file (a path, or a name ending in .py), not a module."""
    return module.endswith(".py") or "/" in module or os.sep in module


def parse_spec(spec: object) -> tuple[str, str]:
    """(module or .py file path, function) of a spec; ValueError naming both accepted forms otherwise. The text
    only: whether the file exists is `check_model_file`'s."""
    if not isinstance(spec, str) or len(spec) > MAX_SPEC_CHARS or ":" not in spec:
        raise ValueError(f"model spec must look like {SPEC_HELP}, got {spec!r:.300}")
    module, _, function = spec.rpartition(":")
    if is_file_spec(module):
        if not module.endswith(".py") or any(ord(c) < 32 for c in module):
            raise ValueError(f"model spec {spec!r:.300}: {module!r:.200} is not a .py file; valid: {SPEC_HELP}")
        if not _FUNCTION.fullmatch(function):
            raise ValueError(f"model spec {spec!r:.300}: {function!r:.60} is not a function name; valid: {SPEC_HELP}")
        return module, function
    if len(spec) > 300 or not SPEC_PATTERN.fullmatch(spec):
        raise ValueError(f"model spec must look like {SPEC_HELP}, got {spec!r:.300}")
    return module, function


def check_model_file(path: str) -> str:
    """The absolute path of a model file, checked to be a regular .py file before anything reads it (a FIFO
    would block the reader, a device never end); ValueError in one line naming the problem and both forms."""
    absolute = os.path.abspath(path)
    try:
        mode = os.stat(absolute).st_mode
    except FileNotFoundError:
        raise ValueError(f"model file {path}: no such file; valid: {SPEC_HELP}") from None
    except OSError as error:
        raise ValueError(f"model file {path}: cannot read it ({error.strerror}); valid: {SPEC_HELP}") from None
    if stat.S_ISDIR(mode):
        raise ValueError(f"model file {path}: is a folder, not a .py file; valid: {SPEC_HELP}")
    if not stat.S_ISREG(mode):
        raise ValueError(f"model file {path}: not a regular file (a FIFO, socket or device); valid: {SPEC_HELP}")
    return absolute


def absolute_spec(spec: str) -> str:
    """A spec as every process reads it alike: a file's path made absolute (ranks start in other folders) and
    checked to be a regular file; a module spec as it is. ValueError in one line otherwise."""
    module, function = parse_spec(spec)
    if not is_file_spec(module):
        if os.path.lexists(module):  # `model.txt:build` names a file, not the module model.txt
            raise ValueError(f"model file {module}: not a .py file; valid: {SPEC_HELP}")
        return spec
    return f"{check_model_file(module)}:{function}"


def check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class CNNConfig:
    """The CNN: the classic CIFAR-10 examples' conv blocks and three fully connected layers (3x32x32 images)."""

    channels: int = field(default=32, metadata={"flag": "cnn-channels"})
    """Channels of the first conv block; they double every two blocks, up to 4x."""
    blocks: int = field(default=4, metadata={"flag": "cnn-blocks"})
    """Conv blocks; stages share out these plus the 3 fully connected layers."""
    fc_size: int = field(default=256, metadata={"flag": "cnn-fc"})
    """Width of the two hidden fully connected layers."""

    def __post_init__(self) -> None:
        for name in ("channels", "blocks", "fc_size"):
            check_positive(f"cnn {name}", getattr(self, name))
        if self.blocks > MAX_LAYERS - 3:  # one layer each, with the 3 fully connected ones: bounded before built
            raise ValueError(f"cnn blocks {self.blocks} is more than pipesim handles: at most {MAX_LAYERS - 3:,}")

    def num_units(self) -> int:
        return self.blocks + 3

    def conv_blocks(self) -> list[tuple[int, int, int]]:
        """Per conv block, (input channels, output channels, input picture side): channels double every two
        blocks up to 4x, and a block pools 2x2 while the picture is larger than 4x4."""
        blocks = []
        channels, size = IMAGE_SHAPE[0], IMAGE_SHAPE[1]
        for index in range(self.blocks):
            out_channels = self.channels * 2 ** min(index // 2, 2)
            blocks.append((channels, out_channels, size))
            channels, size = out_channels, size // 2 if size > 4 else size
        return blocks

    def flat_features(self) -> int:
        """Inputs of the first fully connected layer: the last block's output, flattened."""
        channels, size = IMAGE_SHAPE[0], IMAGE_SHAPE[1]
        for _, out_channels, side in self.conv_blocks():
            channels, size = out_channels, side // 2 if side > 4 else side
        return channels * size * size


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts Transformer: the Transformer's sizes, each block's MLP a set of routed experts."""

    experts: int = field(default=4, metadata={"flag": "experts"})
    """Experts per block, each an MLP of the Transformer's ffn width; with --data-parallel D each replica of a
    stage holds experts/D of them (expert parallelism), so D must divide it."""
    top_k: int = field(default=2, metadata={"flag": "top-k"})
    """Experts each token is routed to (1 or 2 as usual; at most --experts)."""

    def __post_init__(self) -> None:
        check_positive("moe experts", self.experts)
        check_positive("moe top_k", self.top_k)
        if self.experts > MAX_EXPERTS:
            raise ValueError(f"moe experts {self.experts} is more than the executor builds: at most {MAX_EXPERTS}")
        if self.top_k > self.experts:
            raise ValueError(f"moe top_k {self.top_k} is more than the {self.experts} experts")


# Field names of the flat model section that run folders written before the split hold.
_LEGACY_MODEL_FIELDS = {
    "num_layers": ("transformer", "num_layers"), "d_model": ("transformer", "hidden_size"),
    "num_heads": ("transformer", "num_heads"), "ffn_size": ("transformer", "ffn_size"),
    "seq_len": ("transformer", "seq_len"), "vocab_size": ("transformer", "vocab_size"),
    "cnn_channels": ("cnn", "channels"), "cnn_blocks": ("cnn", "blocks"), "cnn_fc_size": ("cnn", "fc_size"),
}  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    """The model: a built-in Transformer or CNN and its sizes, or your own factory, and where its stages start."""

    kind: Literal["transformer", "cnn", "moe", "custom"] = field(default="transformer", metadata={"cli": False})
    """transformer, cnn, moe (the Transformer with routed experts), or custom: your own model, built by the
    factory `spec` names."""
    spec: str | None = field(default=None, metadata={"cli": False})
    """A custom model's factory, package.module:function or /absolute/path/file.py:function
    (pipesim_executor.custom_model says what it returns)."""
    transformer: TransformerShape = SMALL_TRANSFORMER
    """The Transformer's sizes (kind transformer)."""
    cnn: CNNConfig = CNNConfig()
    """The CNN's sizes (kind cnn)."""
    moe: MoEConfig = MoEConfig()
    """The experts of the mixture-of-experts Transformer (kind moe; its other sizes are `transformer`'s)."""
    split_points: tuple[int, ...] | None = field(default=None, metadata={"metavar": "A,B,.."})
    """Unit indices where each stage after the first starts, e.g. 2,4,6 (default: the planner's cut of the
    Transformer; the CNN's and a custom model's layers balanced by parameter count)."""

    def __post_init__(self) -> None:
        if self.kind not in (*MODEL_KINDS, CUSTOM):
            raise ValueError(f"unknown model {self.kind!r}; valid: {', '.join(MODEL_KINDS)} or {SPEC_HELP}")
        if (self.kind == CUSTOM) != (self.spec is not None):
            raise ValueError(f"a custom model needs spec {SPEC_HELP}, and only a custom model takes one")
        if self.spec is not None:
            parse_spec(self.spec)  # the text form only; importing waits for pipesim_executor.host.checks
        if not isinstance(self.transformer, TransformerShape) or not isinstance(self.cnn, CNNConfig):
            raise ValueError("model: transformer must be a TransformerShape and cnn a CNNConfig")
        if not isinstance(self.moe, MoEConfig):
            raise ValueError("model: moe must be a MoEConfig")

    @classmethod
    def of_transformer(cls, split_points: tuple[int, ...] | None = None, **sizes: int) -> ModelConfig:
        """The built-in Transformer with the given sizes (TransformerShape's fields) over the executor's small one."""
        return cls("transformer", transformer=replace(SMALL_TRANSFORMER, **sizes), split_points=split_points)

    @classmethod
    def of_cnn(cls, split_points: tuple[int, ...] | None = None, **sizes: int) -> ModelConfig:
        """The built-in CNN with the given sizes (CNNConfig's fields)."""
        return cls("cnn", cnn=CNNConfig(**sizes), split_points=split_points)

    @classmethod
    def of_moe(
        cls, split_points: tuple[int, ...] | None = None, experts: int = 4, top_k: int = 2, **sizes: int
    ) -> ModelConfig:
        """The built-in mixture-of-experts Transformer: `experts` routed experts per block, each token to `top_k`
        of them, with the given Transformer sizes over the executor's small one."""
        shape = replace(SMALL_TRANSFORMER, **sizes)
        return cls("moe", transformer=shape, moe=MoEConfig(experts, top_k), split_points=split_points)

    @classmethod
    def from_dict(cls, data: Any) -> ModelConfig:
        """The model section of config.json: nested (transformer, cnn) or the flat one of older run folders."""
        if not isinstance(data, dict):
            raise ValueError(f"run config: model must be an object, got {data!r:.60}")
        sections: dict[str, dict[str, Any]] = {"transformer": {}, "cnn": {}, "moe": {}}
        top: dict[str, Any] = {}
        for key, value in data.items():
            if key in _LEGACY_MODEL_FIELDS:
                section, name = _LEGACY_MODEL_FIELDS[key]
                sections[section][name] = value
            elif key in sections:
                if not isinstance(value, dict):
                    raise ValueError(f"run config: model {key} must be an object, got {value!r:.60}")
                sections[key].update(value)
            else:
                top[key] = value
        valid = {f.name for f in fields(cls)}
        unknown = set(top) - valid
        if unknown:
            raise ValueError(f"unknown model fields {sorted(unknown)}; valid: {sorted(valid)}")
        if top.get("split_points") is not None:
            if not isinstance(top["split_points"], (list, tuple)):
                raise ValueError(f"model split_points must be a list of unit indices, got {top['split_points']!r:.60}")
            top["split_points"] = tuple(top["split_points"])
        try:
            shape = replace(SMALL_TRANSFORMER, **sections["transformer"])
            cnn = CNNConfig(**sections["cnn"])
            moe = MoEConfig(**sections["moe"])
        except TypeError as error:  # an unknown size field
            raise ValueError(f"run config: model sizes: {error}") from None
        return cls(**top, transformer=shape, cnn=cnn, moe=moe)

    @property
    def num_units(self) -> int:
        """Layers that stages share out (pipesim_executor.rank.model builds exactly these): a Transformer's embedding,
        num_layers blocks and output projection; a CNN's conv blocks and 3 FC layers. A custom model's count is
        known once its factory ran (pipesim_executor.host.model_check.check_custom_model)."""
        if self.kind == CUSTOM:
            raise ValueError(
                "a custom model's layers are counted by running its factory (pipesim_executor.host.checks)"
            )
        return self.transformer.num_units() if self.kind in TRANSFORMER_KINDS else self.cnn.num_units()

    def stage_split(self, num_stages: int, microbatch_size: int = 1, recompute: bool = False) -> tuple[int, ...] | None:
        """Where a run cuts this model into `num_stages` stages: its `split_points` when given, else the planner's
        cut of the built-in Transformer (`pipesim.cost.description.shape_split`); None where pipesim has no times
        for the model (the CNN, the MoE Transformer, a custom factory, or more stages than units, which the build
        refuses by name): its layers are then balanced by parameter count when built
        (`pipesim.cost.description.parameter_split`).
        Every process that builds the model (the ranks, the single-process reference, torch's) cuts it here."""
        if self.split_points is not None:
            return self.split_points
        if self.kind != "transformer" or not 1 <= num_stages <= self.num_units:
            return None
        from pipesim.cost.description import shape_split  # the planner's pricing, loaded by runs that use it

        return shape_split(self.transformer, num_stages, microbatch_size, recompute)

    def describe_units(self) -> str:
        if self.kind == CUSTOM:
            return f"the layers of {self.spec}"
        if self.kind == "transformer":
            return f"embedding + {self.transformer.num_layers} blocks + output"
        if self.kind == "moe":
            return f"embedding + {self.transformer.num_layers} blocks of {self.moe.experts} experts + output"
        return f"{self.cnn.blocks} conv blocks + 3 FC layers"
