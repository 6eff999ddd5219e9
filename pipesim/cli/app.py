"""`pipesim app`: start the Streamlit app, from a checkout or from an installed pipesim (`pipesim[app]`).

Usage:
  pipesim app                                  (http://localhost:8501)
  pipesim app --port 8502
  pipesim app -- --server.address 0.0.0.0      (anything after -- goes to `streamlit run` as given)

An installed pipesim carries the app as `pipesim_app` (app.py, app_pages/, static/ and .streamlit/config.toml
in one folder, as `streamlit run` wants them); a checkout runs its own app.py. Streamlit reads its settings
from the folder it is started in, which for an installed user is not the app's: the app's own config.toml is
passed as command-line settings instead (listening on localhost only, serving static/, the upload cap), so
the app behaves the same from anywhere; the user's flags come after and win. Runs go under ./runs (or
$PIPESIM_RUNS_ROOT), as from the checkout. pipesim does not import streamlit: it starts it in this process's
place (exec), so Ctrl-C and signals reach it directly.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from pipesim.cli.common import UsageError
from pipesim.flags import EXIT_STATUS_HELP, int_flag

APP_PACKAGE = "pipesim_app"
APP_SCRIPT = "app.py"
APP_CONFIG = Path(".streamlit") / "config.toml"
MAX_CONFIG_BYTES = 64 * 1024


def add_commands(commands: argparse._SubParsersAction) -> None:
    app = commands.add_parser(
        "app", allow_abbrev=False, help="start the Streamlit app (needs pipesim[app])", epilog=EXIT_STATUS_HELP
    )
    app.add_argument("--port", type=_port, metavar="P", help="the port to serve on (default: Streamlit's, 8501)")
    app.add_argument("--print-command", action="store_true", help="print the streamlit command instead of running it")
    app.add_argument("streamlit_args", nargs="*", metavar="-- STREAMLIT_ARGS", help="passed to `streamlit run`")


_port = int_flag(1, 65535)  # a TCP port


def app_script() -> Path:
    """The app's main script: the installed `pipesim_app`'s, else this checkout's app.py."""
    spec = importlib.util.find_spec(APP_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    folders.append(str(Path(__file__).resolve().parents[2]))  # a checkout: pipesim/cli/app.py -> the root
    for folder in folders:
        script = Path(folder) / APP_SCRIPT
        if script.is_file() and (Path(folder) / "app_pages").is_dir():
            return script
    raise UsageError(f"the app is not installed with this pipesim (no {APP_PACKAGE}): pip install 'pipesim[app]'")


def config_flags(config_file: Path) -> list[str]:
    """The app's config.toml as `streamlit run` settings: `--section.key=value`, one per setting."""
    if not config_file.is_file():
        return []
    if config_file.stat().st_size > MAX_CONFIG_BYTES:
        raise UsageError(f"{config_file}: over {MAX_CONFIG_BYTES} bytes, not a Streamlit config")
    try:
        config = tomllib.loads(config_file.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{config_file}: not valid TOML ({error})") from None
    return [f"--{name}={_flag_value(value)}" for name, value in _settings(config)]


def _settings(table: Mapping[str, object], prefix: str = "") -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            found += _settings(value, f"{prefix}{key}.")
        else:
            found.append((f"{prefix}{key}", value))
    return found


def _flag_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def streamlit_command(script: Path, port: int | None, extra: list[str]) -> list[str]:
    """`python -m streamlit run APP` with the app's settings, the port, then the user's own flags (which win)."""
    flags = config_flags(script.parent / APP_CONFIG)
    if port is not None:
        flags.append(f"--server.port={port}")
    return [sys.executable, "-m", "streamlit", "run", str(script), *flags, *extra]


def cmd_app(args: argparse.Namespace) -> int:
    command = streamlit_command(app_script(), args.port, list(args.streamlit_args))
    if args.print_command:
        print(" ".join(command))
        return 0
    if importlib.util.find_spec("streamlit") is None:
        raise UsageError("the app needs streamlit, which is not installed here: pip install 'pipesim[app]'")
    sys.stdout.flush()
    os.execv(command[0], command)
    raise AssertionError("unreachable: exec returns only by raising")


COMMANDS = MappingProxyType({"app": cmd_app})
