"""Example models for `--model package.module:factory`, shipped as `pipesim_examples` (every module here; see
pipesim_executor.custom_model and pipesim_executor.shipped_examples)."""
