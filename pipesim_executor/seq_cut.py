"""Where a run cuts each microbatch's sequence into chunks (Seq1F1B), decided before any process starts.

The cut is pipesim's (`pipesim.cost.seq_chunks.token_bounds`): even tokens, or balanced compute under causal
attention, with the built-in Transformer's own attention share (`ModelDescription.attention_fraction`). Only that
model runs chunk by chunk (its attention keeps the earlier chunks' keys and values:
pipesim_executor.rank.seq_chunks); any other is refused here in one line. No torch: the launcher checks with it.
"""

from __future__ import annotations

from pipesim.ir import Schedule
from pipesim_executor.model_config import ModelConfig


def data_microbatches(schedule: Schedule) -> int:
    """Microbatches of data a step of `schedule` takes: its action microbatches over the sequence chunks of each,
    in every direction (DualPipe numbers each direction's own)."""
    return schedule.num_microbatches // schedule.seq_chunks * schedule.pipelines


def token_bounds(model: ModelConfig, schedule: Schedule) -> tuple[int, ...]:
    """Where each sequence chunk of `schedule` starts in `model`'s sequence, and the end; ValueError in one line for
    a model that cannot run chunks, or a sequence too short for them."""
    from pipesim.cost.description import ModelDescription
    from pipesim.cost.seq_chunks import token_bounds as bounds

    if model.kind != "transformer":
        raise ValueError(
            f"schedule {schedule.name!r} runs each microbatch as {schedule.seq_chunks} sequence chunks, and only the "
            f"built-in transformer keeps earlier chunks' keys and values for them, not a {model.kind} model; use "
            "--model transformer, or run 1f1b"
        )
    shape = model.transformer
    attention = ModelDescription.of_shape(shape).attention_fraction()
    return bounds(shape.seq_len, schedule.seq_chunks, attention, schedule.seq_cut)
