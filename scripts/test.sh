#!/usr/bin/env bash
# The test suite (README's test command). Fast CPU tests plus the real-LIBERO tests; slow ones are
# marked and run with: bash scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python -m pytest -q --durations=30 "$@"   # the 30 slowest, to keep CI time in view
