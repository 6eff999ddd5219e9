"""Factories for the page's model tests (`tests.helpers.page_models:NAME`). Importing this module appends the
importing process's id to the file named by PIPESIM_TEST_IMPORT_LOG, so a test can tell which process imported it
(never the app's server)."""

from __future__ import annotations

import os

_LOG = os.environ.get("PIPESIM_TEST_IMPORT_LOG")
if _LOG:
    with open(_LOG, "a", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()}\n")


def interrupts():
    raise KeyboardInterrupt


def exits():
    raise SystemExit(3)


def aborts():
    os.abort()


def returns_none():
    return None


def serves_forever():
    import time

    while True:
        time.sleep(1)
