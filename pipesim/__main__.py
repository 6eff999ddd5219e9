"""`python -m pipesim ...`: see pipesim.cli for the commands."""

from pipesim.cli import main

raise SystemExit(main())
