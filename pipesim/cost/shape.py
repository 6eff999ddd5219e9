"""The sizes of a decoder-only Transformer, declared once: the planner prices them (`ModelDescription` is a shape
plus a microbatch, a dtype and a device), the executor builds them (`pipesim_executor.config.ModelConfig.transformer`),
the example GPT and the Run page's size presets are shapes too.

Each field's docstring is its help text, and its metadata its flag, on both command lines (pipesim.flags).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipesim.limits import MAX_LAYERS


@dataclass(frozen=True)
class TransformerShape:
    """A decoder-only Transformer: an embedding, blocks of attention and an MLP, and an output head.

    The defaults are a GPT of about 1.3 billion parameters, the planner's; the executor runs a small one.
    """

    num_layers: int = field(default=24, metadata={"flag": "layers"})
    """Transformer blocks; stages share out these plus the embedding and the output head (num_layers + 2 units)."""
    hidden_size: int = field(default=2048, metadata={"flag": "hidden", "aliases": ("d-model",)})
    """Width of the residual stream (d_model); a multiple of the number of heads."""
    ffn_size: int = field(default=8192, metadata={"flag": "ffn"})
    """Width of each block's MLP."""
    num_heads: int = field(default=16, metadata={"flag": "heads"})
    """Attention heads per block."""
    seq_len: int = 2048
    """Tokens per sequence."""
    vocab_size: int = field(default=50257, metadata={"flag": "vocab"})
    """Vocabulary size: the embedding's rows and the output head's columns."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "ffn_size", "num_heads", "seq_len", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}")
        if self.num_layers > MAX_LAYERS - 2:  # one unit cost per layer follows: bounded before it is made
            raise ValueError(
                f"num_layers {self.num_layers} is more than pipesim handles: at most {MAX_LAYERS - 2:,} (with the "
                f"embedding and the head, {MAX_LAYERS:,} units to balance; see pipesim/limits.py)"
            )

    def num_units(self) -> int:
        """Units that stages share out, as the executor cuts the model: the embedding, the blocks, the head."""
        return self.num_layers + 2
