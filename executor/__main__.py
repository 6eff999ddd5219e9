"""`python -m executor ...` in the checkout: the same as `python -m pipesim_executor` (and `pipesim-run`)."""

import sys

from pipesim_executor.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
