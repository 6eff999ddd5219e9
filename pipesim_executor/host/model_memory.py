"""A built-in model too large for this machine, refused before a folder is made or a rank starts.

`--hidden 10000000` or `--cnn-channels 100000000` once started every rank, which then allocated until the
allocator gave up (minutes and gigabytes later). The bytes a model needs are the planner's price
(pipesim.sim.memory.training_bytes: parameters, gradients, optimizer state and one microbatch's activations,
the Transformer's sizes priced by pipesim.cost.description.ModelDescription), compared with the memory this
machine has: its RAM, or the control group's limit where that is lower.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pipesim.cost.description import ModelDescription
from pipesim.sim.memory import training_bytes
from pipesim.units import format_bytes
from pipesim_executor.config import CUSTOM, NUM_CLASSES, TRANSFORMER_KINDS, CNNConfig, ModelConfig

FP32_BYTES = 4  # the executor keeps fp32 master weights, gradients and optimizer state whatever the compute dtype
ACTIVATION_BYTES = {"fp32": "fp32", "bf16": "bf16"}  # the run's dtype: the activations' size
_CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")


def machine_memory_bytes() -> float:
    """This machine's memory: its RAM, or its control group's limit (a container) where that is lower."""
    try:
        memory = float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        memory = float("inf")
    try:
        limit = _CGROUP_LIMIT.read_text(encoding="ascii").strip()
        if limit.isascii() and limit.isdigit():
            memory = min(memory, float(limit))
    except OSError:
        pass
    return memory


def model_bytes(model: ModelConfig, microbatch_size: int, optimizer: str, dtype: str) -> tuple[float, float] | None:
    """(the least memory one replica of a built-in model takes to train a step, pipesim.sim.memory.training_bytes;
    its fp32 parameters alone), or None for a custom model (checked in its own bounded child process instead)."""
    if model.kind == CUSTOM:
        return None
    if model.kind in TRANSFORMER_KINDS:
        # an MoE block holds `experts` MLPs and runs `top_k` of them per token: priced as one MLP that wide
        wide, ffn = model.kind == "moe", model.transformer.ffn_size
        held = dataclasses.replace(model.transformer, ffn_size=ffn * model.moe.experts) if wide else model.transformer
        run = dataclasses.replace(model.transformer, ffn_size=ffn * model.moe.top_k) if wide else model.transformer
        params = ModelDescription.of_shape(held, microbatch_size=1, dtype="fp32").unit_costs()
        stashed = ModelDescription.of_shape(
            run, microbatch_size=microbatch_size, dtype=ACTIVATION_BYTES[dtype]
        ).unit_costs()
        param_bytes = sum(unit.param_bytes for unit in params)
        activation_bytes = sum(unit.activation_bytes for unit in stashed)
    else:
        count, per_sample = cnn_counts(model.cnn)
        param_bytes = float(count * FP32_BYTES)
        activation_bytes = float(per_sample * microbatch_size * FP32_BYTES)
    return training_bytes(param_bytes, activation_bytes, optimizer), param_bytes


def check_model_memory(
    model: ModelConfig,
    microbatch_size: int,
    optimizer: str,
    dtype: str,
    replicas: int = 1,
    device: str = "cpu",
    memory_bytes: float | None = None,
) -> None:
    """ValueError naming the model's sizes and the memory it needs when it cannot fit this machine's memory
    (`memory_bytes`: default machine_memory_bytes()). On the CPU the ranks train in it: `replicas` copies of the
    training memory; on GPUs every rank still builds the model in it first (rank.model.build_model): its fp32
    parameters."""
    priced = model_bytes(model, microbatch_size, optimizer, dtype)
    if priced is None:
        return
    training, parameters = priced
    available = machine_memory_bytes() if memory_bytes is None else memory_bytes
    if device == "cuda":
        if parameters > available:
            raise ValueError(
                f"the {describe_sizes(model)} has {format_bytes(parameters)} of fp32 parameters, which every rank "
                f"builds in this machine's memory first, more than its {format_bytes(available)}: choose smaller sizes"
            )
        return
    needed = training * replicas
    if needed > available:
        copies = f"{replicas} replicas of " if replicas > 1 else ""
        raise ValueError(
            f"{copies}the {describe_sizes(model)} needs at least {format_bytes(needed)} to train (parameters, "
            f"gradients, {optimizer} state and one microbatch of {microbatch_size}'s activations), more than this "
            f"machine's {format_bytes(available)}: choose smaller sizes"
        )


def describe_sizes(model: ModelConfig) -> str:
    """`transformer (--layers 2 --hidden 10000000 ...)`: the built-in model's sizes as their flags."""
    section = model.transformer if model.kind in TRANSFORMER_KINDS else model.cnn
    flags = " ".join(
        f"--{f.metadata.get('flag', f.name).replace('_', '-')} {getattr(section, f.name)}"
        for f in dataclasses.fields(section)
    )
    return f"{model.kind} model ({flags})"


def cnn_counts(cnn: CNNConfig) -> tuple[int, int]:
    """(parameters, values stashed per sample by the forward) of the CNN, counted from the layout its layers are
    built from (CNNConfig.conv_blocks, as pipesim_executor.rank.model.cnn_layers builds them; a test compares
    with torch's own count)."""
    params = activations = 0
    for channels, out_channels, size in cnn.conv_blocks():
        params += channels * out_channels * 9 + out_channels
        activations += channels * size * size + out_channels * size * size  # the input and the conv's output
    flat = cnn.flat_features()
    params += flat * cnn.fc_size + cnn.fc_size + cnn.fc_size * (cnn.fc_size + 1)
    params += cnn.fc_size * NUM_CLASSES + NUM_CLASSES
    activations += flat + 2 * cnn.fc_size + NUM_CLASSES
    return params, activations
