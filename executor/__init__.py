"""The checkout's short name for the executor, kept so that `python -m executor ...` works here as before.

The executor itself is `pipesim_executor` (installed under that name: `executor` is too generic a name to take
in a user's environment). This folder is not shipped; nothing imports it.
"""
