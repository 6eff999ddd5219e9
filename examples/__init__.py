"""Example models for `python -m executor run --model package.module:factory` (see executor.custom_model)."""
