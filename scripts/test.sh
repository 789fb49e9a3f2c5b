#!/usr/bin/env bash
# The test suite (README's test command). Fast CPU tests plus the real-LIBERO tests; slow ones are
# marked and run with: bash scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
# VLARL_INSTALLED=1 (.ci/run, which ran install.sh just before): skip install.sh's re-check
[ "${VLARL_INSTALLED:-0}" = 1 ] || bash scripts/install.sh
exec .venv/bin/python -m pytest -q --durations=30 "$@"   # the 30 slowest, to keep CI time in view
