"""`python -m executor run|list|show ...`: see executor/cli.py for usage."""

import sys

from executor.cli import main

if __name__ == "__main__":
    sys.exit(main())
