#!/usr/bin/env bash
# One step of issue 25, run once by hand: the executor's import name becomes `pipesim_executor` (a top-level
# `executor` would collide in a user's site-packages: PyPI has a package installing that very module), and
# executor/ stays in the checkout as a shim so that `python -m executor ...` works as the README says.
#
# Why a script and not a commit: the rename touches every executor import (about 100 files), so made on a
# branch it conflicts with every branch that touches the executor. Run on main once no such branch is in
# flight, it conflicts with nothing; a branch begun before it runs it too (it is idempotent: it renames only
# what still says `executor.`). It removes itself. Then: wrap the lines ruff reports too long, run the tests
# (tests/test_install.py refuses any import of the old name in shipped code), commit.
#
#   bash scripts/rename_executor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ruff=${RUFF:-.venv/bin/ruff}

if [ -d executor/host ]; then
  git mv executor pipesim_executor
fi

# Module paths (executor.x, executor/x) and imports; not `python -m executor` (the shim), not prose ("the
# executor"), not the ASCII diagrams in docs/design.md (their columns are aligned).
git ls-files -z -- '*.py' '*.md' '*.sh' '*.toml' .ci/run ':!scripts/rename_executor.sh' ':!executor/*' \
  | xargs -0 perl -pi -e '
    next if /──/;
    if (/^\* the executor.s import name: `executor`, /) {
      $_ = "* the executor is `pipesim_executor` (a top-level `executor` would collide in a user\x27s environment); the"
         . " checkout\x27s `executor/` is a shim for `python -m executor`, not shipped;\n";
      next;
    }
    s/(?<![\w.\/-])executor(?=[.\/][A-Za-z_])/pipesim_executor/g;
    s/\b(from|import) executor\b/$1 pipesim_executor/g;
    s/"-m", "executor", "verify-plan"/"-m", "pipesim_executor", "verify-plan"/g;
    s/\x27executor\x27, \x27kaleido\x27/\x27pipesim_executor\x27, \x27kaleido\x27/g;
    s/_modules\("executor"\)/_modules("pipesim_executor")/g;
    s/module\.startswith\("executor"\)/module.startswith("pipesim_executor")/g;
    s/^    "executor", "pipesim_executor\.host"/    "pipesim_executor", "pipesim_executor.host"/;
  '

mkdir -p executor
cat > executor/__init__.py <<'EOF'
"""The checkout's short name for the executor, kept so that `python -m executor ...` works here as before.

The executor itself is `pipesim_executor` (installed under that name: `executor` is too generic a name to take
in a user's environment). This folder is not shipped; nothing imports it.
"""
EOF
cat > executor/__main__.py <<'EOF'
"""`python -m executor ...` in the checkout: the same as `python -m pipesim_executor` (and `pipesim-run`)."""

import sys

from pipesim_executor.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
EOF
git add executor pipesim_executor

"$ruff" check --quiet --fix --select I . || true # pipesim_executor now sorts after pipesim
"$ruff" format --quiet .
git rm -qf scripts/rename_executor.sh
git add -u
echo "rename_executor: done; what ruff still reports (lines the longer name made too long) is below, if anything"
"$ruff" check --quiet . || true
