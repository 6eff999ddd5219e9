"""The app's widget keys: the settings every page shares have one key each (app_pages.parts.state: schedule, ranks,
microbatches, chunks, and the costs under "cost-"), the rest are the page's own ("sim-...", "cmp-...")."""

from __future__ import annotations

SHARED = {
    "schedule": "schedule",
    "ranks": "ranks",
    "microbatches": "microbatches",
    "chunks": "chunks",
    "f": "cost-f",
    "b": "cost-b",
    "w": "cost-w",
    "comm": "cost-comm",
    "act": "cost-act",
    "recompute": "cost-recompute",
    "cost-source": "cost-source",
    "slow-ranks": "slow-ranks",  # the what-if (app_pages.parts.whatif), shared by Simulate and Compare
    "slow-kinds": "slow-kinds",
    "link-delays": "link-delays",
    "sensitivity": "sensitivity",  # Compare's and Plan's
}


def widget_key(page: str, name: str) -> str:
    """The key of setting `name` on the page whose own keys start with `page` ("sim", "cmp", "dag", "run")."""
    return SHARED.get(name, f"{page}-{name}")
