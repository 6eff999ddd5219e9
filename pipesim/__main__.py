"""`python -m pipesim ...`: see pipesim/cli/ for the commands."""

from pipesim.cli.main import main

raise SystemExit(main())
