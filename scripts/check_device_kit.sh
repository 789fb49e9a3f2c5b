#!/usr/bin/env bash
# Check .kit/ (scripts/device_kit.sh) the way the GPU machine will use it, in a clean Python 3.12 venv here:
#   bash scripts/check_device_kit.sh            # after scripts/device_kit.sh; ~5 min; not part of CI
# 1. A clean venv of Python 3.12 (the GPU image's) with what the image already has that the kit relies on
#    (numpy, scipy, numba, opencv, pyyaml, typer, rich, pillow, imageio, matplotlib ... from the registry).
# 2. .kit/run.sh's own install (pip --no-deps --target .kit/site, the trees, the asset-subset manifest).
# 3. From that site alone: pydantic, hydra, mujoco, robosuite, bddl, LIBERO import; vlarl loads every recipe
#    gpu_truth runs; all 10 libero_spatial envs build from the kit's asset subset (vlarl's asset check on)
#    and step with both cameras.
# 4. With a torch for cp312 importable there (TORCH_WHEEL=/path/to/torch-*-cp312-*.whl, or a registry that
#    serves one): `python benchmarks/gpu_truth.py --smoke` from the kit. The local registries serve no cp312
#    torch (only a cp311 CPU wheel), and PyPI's cp312 torch is the CUDA build (GBs), so without TORCH_WHEEL
#    this step is skipped and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
# a real 3.12 interpreter (a pyenv shim on PATH may point at no 3.12): pyenv's own first, then PATH's
PY312=${PY312:-$(ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}
PY312=${PY312:-$(command -v python3.12 || true)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vlarl-kit.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say() { echo "[check_device_kit] $*"; }
fail() { echo "[check_device_kit] FAILED: $*" >&2; exit 1; }
[ -f .kit/run.sh ] || fail "no .kit/: run scripts/device_kit.sh first"
"$PY312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' || fail "$PY312 is not Python 3.12"

say "clean Python 3.12 venv with the image's packages the kit relies on"
"$PY312" -m venv "$WORK/venv"
V=$WORK/venv/bin/python
"$V" -m pip install -q numpy scipy numba opencv-python-headless pyyaml typer rich pillow imageio matplotlib \
  h5py cloudpickle tqdm absl-py packaging typing-extensions >"$WORK/pip.log" 2>&1 || { tail "$WORK/pip.log"; fail "image stand-ins"; }
if [ -n "${TORCH_WHEEL:-}" ]; then
  "$V" -m pip install -q "$TORCH_WHEEL" transformers safetensors tokenizers sentencepiece huggingface-hub peft \
    >>"$WORK/pip.log" 2>&1 || { tail "$WORK/pip.log"; fail "torch from $TORCH_WHEEL"; }
fi

say "the kit's install (.kit/run.sh, KIT_INSTALL_ONLY=1)"
cp -r "$REPO/.kit" "$WORK/repo.kit"
mkdir -p "$WORK/repo" && git -C "$REPO" archive HEAD | tar -x -C "$WORK/repo"
mv "$WORK/repo.kit" "$WORK/repo/.kit"
(cd "$WORK/repo" && KIT_INSTALL_ONLY=1 PYTHON="$V" bash .kit/run.sh) || fail "the kit's install"
SITE=$WORK/repo/.kit/site

say "imports, recipes and the 10 libero_spatial envs from the kit alone"
export PYTHONPATH=$SITE VLARL_CACHE=$WORK/cache
(cd "$WORK" && "$V" - <<'PYEOF'
import importlib.metadata as md
import os, sys, time
site = os.environ["PYTHONPATH"]
for name in ("pydantic", "hydra", "omegaconf", "mujoco", "robosuite", "bddl", "vlarl_cli"):
    module = __import__(name)
    assert module.__file__.startswith(site), (name, module.__file__)
print("versions:", {n: md.version(n) for n in ("pydantic", "hydra-core", "mujoco", "robosuite", "vlarl")})
sys.path.insert(0, os.path.join(os.getcwd(), "repo", "benchmarks"))
from vlarl_cli.config.loading import load_config
import gpu_truth
for family in gpu_truth.FAMILIES:
    gpu_truth._family_config(family, smoke=False)
load_config(*gpu_truth.iteration_recipe(False, __import__("pathlib").Path("/tmp")))
from vlarl_cli.envs.libero.setup import prepare_libero
paths = prepare_libero()  # the asset check, against the kit's subset manifest
print("MUJOCO_GL:", paths.mujoco_gl)
from libero.libero.envs.env_wrapper import ControlEnv  # (libero.libero.benchmark imports torch: not used here)
import numpy as np
bddl_files = sorted((paths.bddl_dir / "libero_spatial").glob("*.bddl"))
assert len(bddl_files) == 10, bddl_files
for i, bddl in enumerate(bddl_files):
    start = time.perf_counter()
    env = ControlEnv(bddl_file_name=str(bddl), use_camera_obs=True,
                     has_renderer=False, has_offscreen_renderer=True,
                     camera_names=["agentview", "robot0_eye_in_hand"], camera_heights=224, camera_widths=224)
    env.reset()
    obs, *_ = env.step(np.zeros(7))
    assert obs["agentview_image"].shape == (224, 224, 3) and obs["agentview_image"].std() > 0, i
    env.close()
    print(f"libero_spatial task {i}: built, reset and stepped in {time.perf_counter() - start:.1f} s")
PYEOF
) || fail "the kit's packages"

if "$V" -c "import torch" 2>/dev/null; then
  say "benchmarks/gpu_truth.py --smoke from the kit"
  (cd "$WORK/repo" && PYTHONPATH=$SITE "$V" benchmarks/gpu_truth.py --smoke --out-dir "$WORK/out" >"$WORK/smoke.json") \
    || fail "gpu_truth --smoke"
  "$V" -c "import json,sys; r=json.load(open(sys.argv[1])); print('failed parts:', r['failed']); sys.exit(bool(r['failed']))" \
    "$WORK/smoke.json" || fail "a smoke part failed"
else
  say "SKIPPED gpu_truth --smoke: no torch for cp312 here (set TORCH_WHEEL=/path/to/torch-*-cp312-*.whl)"
fi
say "OK"
