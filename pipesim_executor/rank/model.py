"""The reference models, their split into pipeline stages, and their synthetic data.

Two models, both built as an ordered list of layers so that any number of
stages can be cut from them:

* the classic PyTorch tutorial Transformer: token embedding scaled by sqrt(d)
  plus sinusoidal positions, N post-norm blocks (causal multi-head
  self-attention, layer norm, ReLU feed-forward), a linear output to the
  vocabulary; next-token cross-entropy;
* a small CIFAR-style CNN: conv blocks (conv, ReLU, max-pool), then FC layers;
  3x32x32 images, 10 classes.

Every parameterised operation is its own leaf module (`nn.Linear`,
`nn.LayerNorm`, `nn.Embedding`, `nn.Conv2d`) whose parameters feed only that
module's output: the split backward (I then W) relies on it to compute weight
gradients from each leaf's output gradient without redoing the input-gradient
work. No dropout and no batch norm: a microbatched pipeline must produce the
same gradients as one full-batch pass.

The weights depend only on (config, seed): every rank builds the whole layer
list the same way and keeps its own stages, so whichever rank builds a stage,
its weights are the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipesim.cost.description import parameter_split
from pipesim_executor.config import (
    CUSTOM,
    IMAGE_SHAPE,
    NUM_CLASSES,
    TRANSFORMER_KINDS,
    ModelConfig,
    check_split_points,
)

# --- Transformer ---------------------------------------------------------------------------------------------


def sinusoidal_positions(seq_len: int, d_model: int) -> Tensor:
    """The fixed sin/cos table of "Attention is all you need" (odd d_model handled)."""
    position = torch.arange(seq_len, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(seq_len, d_model)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)[:, : d_model // 2]
    return table


class TokenEmbedding(nn.Module):
    """Token embedding times sqrt(d_model), plus sinusoidal positional encoding (from a sequence chunk's start)."""

    takes_seq_chunk = True  # pipesim_executor.rank.seq_chunks

    def __init__(self, vocab_size: int, d_model: int, seq_len: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)  # the tutorial's init
        self.scale = math.sqrt(d_model)
        self.register_buffer("positions", sinusoidal_positions(seq_len, d_model), persistent=False)

    def forward(self, tokens: Tensor, chunk: Any = None) -> Tensor:
        start = 0 if chunk is None else chunk.start
        return self.embedding(tokens) * self.scale + self.positions[start : start + tokens.shape[1]]


class TransformerBlock(nn.Module):
    """nn.TransformerEncoderLayer's post-norm block, written with one leaf module per weight. Over a sequence
    chunk, its attention also reads the earlier chunks' keys and values (pipesim_executor.rank.seq_chunks)."""

    takes_seq_chunk = True

    def __init__(self, d_model: int, num_heads: int, ffn_size: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ffn_size)
        self.ff2 = nn.Linear(ffn_size, d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, chunk: Any = None) -> Tensor:
        batch, seq, d_model = x.shape
        head = d_model // self.num_heads
        q, k, v = self.qkv(x).view(batch, seq, 3, self.num_heads, head).permute(2, 0, 3, 1, 4)
        if chunk is None:
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            attended = chunk.attend(self, q, k, v)
        attended = attended.transpose(1, 2).reshape(batch, seq, d_model)
        x = self.norm1(x + self.proj(attended))
        return self.norm2(x + self.ff2(F.relu(self.ff1(x))))


def transformer_layers(config: ModelConfig) -> list[nn.Module]:
    shape = config.transformer
    layers: list[nn.Module] = [TokenEmbedding(shape.vocab_size, shape.hidden_size, shape.seq_len)]
    layers += [_block(config) for _ in range(shape.num_layers)]
    head = nn.Linear(shape.hidden_size, shape.vocab_size)
    nn.init.zeros_(head.bias)
    nn.init.uniform_(head.weight, -0.1, 0.1)
    layers.append(head)
    return layers


def _block(config: ModelConfig) -> nn.Module:
    """A block of the Transformer, or of the mixture-of-experts one (its MLP routed experts)."""
    shape = config.transformer
    if config.kind == "moe":
        from pipesim_executor.rank.moe import MoEBlock  # its own module, loaded by the runs that use it

        return MoEBlock(shape.hidden_size, shape.num_heads, shape.ffn_size, config.moe.experts, config.moe.top_k)
    return TransformerBlock(shape.hidden_size, shape.num_heads, shape.ffn_size)


# --- CNN -----------------------------------------------------------------------------------------------------


class ConvBlock(nn.Module):
    """3x3 conv, ReLU, and a 2x2 max-pool while the picture is larger than 4x4."""

    def __init__(self, in_channels: int, out_channels: int, pool: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = pool

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.conv(x))
        return F.max_pool2d(x, 2) if self.pool else x


class FCLayer(nn.Module):
    """Linear layer (flattening its input first), with ReLU except on the classifier."""

    def __init__(self, in_features: int, out_features: int, relu: bool) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.relu = relu

    def forward(self, x: Tensor) -> Tensor:
        x = self.linear(x.flatten(1))
        return F.relu(x) if self.relu else x


def cnn_layers(config: ModelConfig) -> list[nn.Module]:
    """The CNN's layers, as its config lays them out (CNNConfig.conv_blocks: the one place the shapes are worked
    out, which its memory price reads too)."""
    layers: list[nn.Module] = []
    cnn = config.cnn
    for channels, out_channels, size in cnn.conv_blocks():
        layers.append(ConvBlock(channels, out_channels, pool=size > 4))
    layers.append(FCLayer(cnn.flat_features(), cnn.fc_size, relu=True))
    layers.append(FCLayer(cnn.fc_size, cnn.fc_size, relu=True))
    layers.append(FCLayer(cnn.fc_size, NUM_CLASSES, relu=False))
    return layers


# --- public API ----------------------------------------------------------------------------------------------


def build_model(config: ModelConfig, seed: int) -> list[nn.Module]:
    """The model's ordered layers, fp32 on CPU; same (config, seed) -> same weights.

    The global RNG is forked, so building a model leaves the caller's random state alone. A custom model is
    its factory's layers (pipesim_executor.custom_model), built under the same seed.
    """
    if config.kind == CUSTOM:
        return model_parts(config, seed)[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers = cnn_layers(config) if config.kind == "cnn" else transformer_layers(config)
    assert len(layers) == config.num_units, "ModelConfig.num_units must count the layers built here"
    return layers


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def split_stages(
    layers: Sequence[nn.Module], num_stages: int, split_points: Sequence[int] | None = None
) -> list[nn.Module]:
    """Cut the layer list into `num_stages` nn.Sequential stages at `stage_starts` (see there)."""
    bounds = (0, *stage_starts(layers, num_stages, split_points), len(layers))
    return [nn.Sequential(*layers[bounds[s] : bounds[s + 1]]) for s in range(num_stages)]


def stage_starts(
    layers: Sequence[nn.Module], num_stages: int, split_points: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Where each stage after the first starts (unit indices, the `--split-points` convention).

    Where `split_points` are not given, the fallback for a model pipesim has no times for: its layers' parameter
    counts balanced (`pipesim.cost.description.parameter_split`). A run passes `ModelConfig.stage_split`, the
    planner's cut of the built-in Transformer. More stages than layers is a ValueError naming both counts.
    """
    if num_stages < 1:
        raise ValueError(f"num_stages must be at least 1, got {num_stages}")
    if num_stages > len(layers):
        raise ValueError(
            f"cannot split a model of {len(layers)} layers into {num_stages} stages: every stage needs a layer; "
            "use fewer ranks or virtual stages, or a deeper model (--layers / --cnn-blocks)"
        )
    if split_points is None:
        return parameter_split([param_count(layer) for layer in layers], num_stages)
    return tuple(check_split_points(split_points, len(layers), num_stages))


def make_batch(config: ModelConfig, batch_size: int, seed: int, step: int) -> tuple[Tensor, Tensor]:
    """Synthetic (inputs, targets) on CPU, a pure function of (config, batch_size, seed, step).

    The data has structure a model can learn, so the loss falls: token sequences are
    arithmetic progressions modulo the vocabulary (stride 1..3); each image is its
    class's fixed template plus noise.
    """
    if config.kind == CUSTOM:
        return model_parts(config, seed)[1](batch_size, seed, step)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    if config.kind in TRANSFORMER_KINDS:
        shape = config.transformer
        start = torch.randint(0, shape.vocab_size, (batch_size, 1), generator=generator)
        stride = torch.randint(1, 4, (batch_size, 1), generator=generator)
        sequence = (start + stride * torch.arange(shape.seq_len + 1)) % shape.vocab_size
        return sequence[:, :-1].contiguous(), sequence[:, 1:].contiguous()
    templates = torch.randn(NUM_CLASSES, *IMAGE_SHAPE, generator=torch.Generator().manual_seed(seed))
    labels = torch.randint(0, NUM_CLASSES, (batch_size,), generator=generator)
    images = 0.5 * templates[labels] + torch.randn(batch_size, *IMAGE_SHAPE, generator=generator)
    return images, labels


def loss_fn(config: ModelConfig) -> Callable[[Tensor, Tensor], Tensor]:
    """Mean cross-entropy: over tokens for the Transformers, over images for the CNN; a custom model's own."""
    if config.kind == CUSTOM:
        return model_parts(config, 0)[2]

    def cross_entropy(output: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))

    return cross_entropy


BatchFn = Callable[[int, int, int], tuple[Tensor, Tensor]]  # (batch_size, seed, step) -> (inputs, targets)


def model_parts(config: ModelConfig, seed: int) -> tuple[list[nn.Module], BatchFn, Callable[[Tensor, Tensor], Tensor]]:
    """The layers, the batch maker and the loss, from one call of the model's builder (a custom model's factory
    runs once here; the ranks keep the batch maker rather than calling the factory every step)."""
    if config.kind != CUSTOM:
        return build_model(config, seed), lambda b, s, t: make_batch(config, b, s, t), loss_fn(config)
    from pipesim_executor.custom_model import custom_batch, load_custom_model

    custom = load_custom_model(config.spec, seed)
    return custom.layers, lambda b, s, t: custom_batch(custom, config.spec, b, s, t), custom.loss_fn


def microbatch(tensor: Tensor, index: int, num_microbatches: int) -> Tensor:
    """Rows of microbatch `index` (the batch splits evenly; RunConfig checks it)."""
    size = tensor.shape[0] // num_microbatches
    return tensor[index * size : (index + 1) * size]


def stage_io_shapes(
    stages: Sequence[nn.Module], config: ModelConfig, microbatch_size: int, batch_fn: BatchFn | None = None
) -> list[tuple[torch.Size, torch.Size]]:
    """(input shape, output shape) of every stage for one microbatch: a dry run with one sample.

    Receivers need the shape of each boundary tensor before it arrives (to post irecv).
    """
    sample, _ = make_batch(config, 1, seed=0, step=0) if batch_fn is None else batch_fn(1, 0, 0)
    shapes = []
    with torch.no_grad():
        x = sample
        for stage in stages:
            y = stage(x)
            shapes.append((torch.Size((microbatch_size, *x.shape[1:])), torch.Size((microbatch_size, *y.shape[1:]))))
            x = y
    return shapes
