"""The host side: launch, supervise, follow and read runs; no torch import at module level."""
