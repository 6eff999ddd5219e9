"""`python -m executor run|list|show ...`: see executor/host/cli.py for usage."""

import sys

from executor.host.cli import main

if __name__ == "__main__":
    sys.exit(main())
