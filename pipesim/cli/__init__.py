"""`python -m pipesim ...`: one module per command group (`main` dispatches)."""
