"""The example models shipped with pipesim, under one name that works installed and in the checkout.

The checkout's `examples/` folder is installed as the package `pipesim_examples` (pyproject.toml maps it, as it
maps the app's folder to `pipesim_app`), so every module put in `examples/` ships without a list to keep. A
factory is named `pipesim_examples.gpt_small:build` everywhere; in a checkout that was never installed that name
is read from `examples/` (`module_to_import`), and the checkout's own `examples.gpt_small:build` still works
there. Nothing here imports torch or an example: listing them reads file names.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pipesim.programs import in_checkout

PACKAGE = "pipesim_examples"  # the installed name (pyproject.toml [tool.setuptools] package-dir)
CHECKOUT_PACKAGE = "examples"  # the checkout's folder, importable from the repository's root
FACTORY = "build"  # every example's factory (examples/*.py)
_CHECKOUT_FOLDER = Path(__file__).resolve().parent.parent / CHECKOUT_PACKAGE


def _installed_folder() -> Path | None:
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return Path(locations[0]) if locations else None


def examples_folder() -> Path | None:
    """Where the shipped examples are: the installed package, else the checkout's folder (None: neither)."""
    installed = _installed_folder()
    if installed is not None:
        return installed
    return _CHECKOUT_FOLDER if in_checkout() and (_CHECKOUT_FOLDER / "__init__.py").is_file() else None


def example_names() -> tuple[str, ...]:
    """The example modules (`gpt_small`, ...), read from the folder's file names."""
    folder = examples_folder()
    if folder is None:
        return ()
    return tuple(sorted(path.stem for path in folder.glob("*.py") if not path.name.startswith("_")))


def example_specs() -> tuple[str, ...]:
    """`--model` specs of the shipped examples: `pipesim_examples.gpt_small:build`, ..."""
    return tuple(f"{PACKAGE}.{name}:{FACTORY}" for name in example_names())


def module_to_import(module_name: str) -> str:
    """The module to import for a spec's module: `pipesim_examples.X` is read from the checkout's `examples/`
    where pipesim was not installed (the same file the installed package holds); any other name as it is."""
    top, _, rest = module_name.partition(".")
    if top != PACKAGE or _installed_folder() is not None or not in_checkout():
        return module_name
    return CHECKOUT_PACKAGE + ("." + rest if rest else "")


def hint_for(module_name: str) -> str:
    """What to write instead of a module that cannot be imported, when it names a shipped example by the
    checkout's name outside the checkout ("" when there is nothing to say)."""
    top, _, rest = module_name.partition(".")
    if top == CHECKOUT_PACKAGE and rest.split(".")[0] in example_names():
        return f"; the shipped examples are {PACKAGE}.*, e.g. {PACKAGE}.{rest}:{FACTORY}"
    return ""
