"""The Run page's "Your own model" field: which factories the page accepts, and the model config it makes.

UI glue only: the rules are pipesim_executor.host.model_check's. The page never imports a user's module; it accepts a
factory only from the places the app was started to accept (the shipped `pipesim_examples`, plus
PIPESIM_APP_MODELS), and the launch
checks it in a child process (pipesim_executor.host.model_check.check_custom_model).
"""

from __future__ import annotations

from pipesim_executor.config import CUSTOM, ModelConfig
from pipesim_executor.host.model_check import APP_MODELS_ENV, app_model_sources, check_app_model
from pipesim_executor.shipped_examples import PACKAGE, example_specs


def field_help() -> str:
    """The field's help: the form, and where factories may come from (and how to add a place)."""
    specs = example_specs()
    shipped = f" (shipped: {', '.join(specs)})" if specs else ""
    try:
        places = ", ".join(app_model_sources())
    except ValueError as error:
        places = f"{PACKAGE} ({error})"
    return (
        f"package.module:factory, from {places}{shipped}; checked in a separate process, never in the app's own. "
        f"To add a place, start the app as {APP_MODELS_ENV}=mymodels streamlit run app.py "
        "(modules, or folders under the folder it runs from, comma-separated). Replaces the model and size above"
    )


def placeholder() -> str:
    """The field's example: the first shipped example's spec."""
    specs = example_specs()
    return specs[0] if specs else "mymodels.model:build"


def custom_model_config(spec: str) -> ModelConfig:
    """The config of a user's model named on the page; ValueError (shown by the page) when the spec's module is
    not from a place the app accepts, or the spec is malformed."""
    check_app_model(spec, app_model_sources())
    return ModelConfig(kind=CUSTOM, spec=spec)
