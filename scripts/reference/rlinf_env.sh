#!/usr/bin/env bash
# Build .reference/rlinf_env: an ISOLATED venv holding RLinf 0.3.0's own LIBERO wrapper
# (rlinf/envs/libero: LiberoEnv + ReconfigureSubprocEnv) for tests/conformance/rlinf_env/.
# Never touches the project's venv.
#
# What and why (REFERENCE.md section 7): the rlinf wheel is installed --no-deps (its declared
# dependencies pull a CUDA torch, ray and more); its LIBERO env imports only gym (+ gym-notices),
# omegaconf, torch, numpy, PIL and LIBERO itself, plus rlinf.utils.logging, whose get_logger imports the
# ray-based scheduler for a logger: tests/conformance/rlinf_env/rlinf_shim.py stands in for that one
# module (a plain logging.Logger), nothing else of RLinf is replaced. LIBERO is installed here exactly as scripts/install.sh
# pins it (robosuite 1.4.0, mujoco 2.3.7, bddl 1.0.1, libero 0.1.1 --no-deps, numpy<2, torch==2.13.0 CPU
# wheel); the 622 MB asset tree is NOT copied: libero/libero/assets links to the project's verified
# copy (python -m vlarl_cli.envs.libero.install put it there). Idempotent (stamp file).
#
# Usage: bash scripts/reference/rlinf_env.sh      (then .reference/rlinf_env/bin/python exists)
#        VLARL_VENV=/path/to/project/.venv bash scripts/reference/rlinf_env.sh   (default: ./.venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.reference/rlinf_env
STAMP="$VENV/.vlarl-reference-stamp"
VERSION="rlinf-env-ref-v1"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
    echo "rlinf_env reference environment ready: $VENV"
    exit 0
fi
PROJECT_VENV=${VLARL_VENV:-.venv}
ASSETS=$("$PROJECT_VENV/bin/python" -c "import libero, pathlib; p = pathlib.Path(libero.__file__).parent / 'libero' / 'assets'; assert p.is_dir(), p; print(p.resolve())")
PY=${PYTHON:-python3}
rm -rf "$VENV"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" "numpy<2" "robosuite==1.4.0" "mujoco==2.3.7" "bddl==1.0.1" "future>=0.18.2" easydict "gymnasium>=0.29" \
    "matplotlib>=3.5" "cloudpickle>=2.0" "pyyaml>=6" termcolor tqdm pillow "omegaconf>=2.3"
"${PIP[@]}" --no-deps "libero==0.1.1" "rlinf==0.3.0" "gym==0.26.2" "gym-notices==0.0.8"
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
ln -sfn "$ASSETS" "$SITE/libero/libero/assets"
# LIBERO asks for a config path on first import unless one exists; the tests point LIBERO_CONFIG_PATH at
# the project's config, this check uses a throw-away one.
CFG=$(mktemp -d)
"$VENV/bin/python" - "$CFG" "$SITE" <<'PY'
import os, sys
cfg, site = sys.argv[1], sys.argv[2]
root = os.path.join(site, "libero", "libero")
with open(os.path.join(cfg, "config.yaml"), "w") as fh:
    for key, sub in (("benchmark_root", ""), ("bddl_files", "bddl_files"), ("init_states", "init_files"),
                     ("datasets", "../datasets"), ("assets", "assets")):
        fh.write(f"{key}: {os.path.join(root, sub)}\n")
PY
LIBERO_CONFIG_PATH="$CFG" MUJOCO_GL=${MUJOCO_GL:-egl} PYTHONPATH=tests/conformance/rlinf_env "$VENV/bin/python" - <<'PY'
import robosuite, mujoco
import rlinf_shim  # rlinf.utils.logging without ray (see the file)
from rlinf.envs.libero.libero_env import LiberoEnv  # noqa: F401
assert robosuite.__version__ == "1.4.0" and mujoco.__version__ == "2.3.7", (robosuite.__version__, mujoco.__version__)
print("rlinf_env reference imports: robosuite", robosuite.__version__, "mujoco", mujoco.__version__)
PY
rm -rf "$CFG"
python3 scripts/link_identical.py .venv .reference   # share identical files with the other venvs (CI disk)
echo "$VERSION" > "$STAMP"
echo "rlinf_env reference environment ready: $VENV"
