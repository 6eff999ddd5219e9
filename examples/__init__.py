"""Example models for `python -m executor run --model package.module:factory` (see pipesim_executor.custom_model)."""
