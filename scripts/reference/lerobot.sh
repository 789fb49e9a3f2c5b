#!/usr/bin/env bash
# Build the ISOLATED venvs .reference/lerobot_v21 and .reference/lerobot_v30 holding huggingface's own
# `lerobot` library, the independent writer of the LeRobot datasets in tests/conformance/lerobot/. Never
# touches the project's venv.
#
# What and why: the last lerobot releases that run on Python 3.11 and write each codebase version are
# lerobot 0.3.3 (LeRobotDataset.create writes codebase v2.1: per-episode parquet / MP4, jsonl metadata)
# and lerobot 0.4.4 (codebase v3.0: episodes grouped into files, parquet metadata). Both are installed
# --no-deps: their declared dependencies pin torch < 2.8 / < 2.11 (a multi-GB CUDA build), wandb,
# rerun, opencv, pynput ... none of which the dataset writer imports. Installed beside them: the local
# CPU wheel torch==2.13.0, torchvision (--no-deps; lerobot.datasets imports its transforms), and the
# packages the `lerobot.datasets.lerobot_dataset` import chain needs, with the `datasets` range each
# release declares. pip reports lerobot's unmet declared dependencies ("dependency conflicts"): expected,
# the check at the end imports what the writer uses. Idempotent: a stamp file per venv records a finished
# build. About 6 minutes for both on a loaded 2-core machine with a warm pip cache; then 0.1 s.
#
# Usage: bash scripts/reference/lerobot.sh [v21|v30|all]     (default all)
set -euo pipefail
cd "$(dirname "$0")/../.."
WHICH=${1:-all}
PY=${PYTHON:-python3}

build() {  # build <venv> <stamp version> "<--no-deps packages>" <pip args for the import chain...>
    local venv=$1 version=$2 nodeps=$3
    shift 3
    local stamp="$venv/.vlarl-reference-stamp"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
        echo "lerobot reference environment ready: $venv"
        return 0
    fi
    [[ -x "$venv/bin/python" ]] || "$PY" -m venv "$venv"  # every step below is idempotent
    local pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
    "${pip[@]}" "torch==2.13.0"
    # shellcheck disable=SC2086  # $nodeps is a list of requirement words
    "${pip[@]}" --no-deps $nodeps "torchvision==0.28.0"
    "${pip[@]}" "$@" "huggingface-hub>=0.34.2,<0.36" jsonlines pillow packaging pytest
    # PyPI's Linux torchvision wheels are CUDA builds: their _C.so needs libc10_cuda.so, which the CPU torch
    # lacks, so torchvision runs without its C++ ops, which the dataset writer never calls. But its
    # _meta_registrations.py registers fake kernels for torchvision::nms / qnms unconditionally, which
    # fails when those ops were never defined. Defining the two schemas first (as csrc/ops/nms.cpp does)
    # lets `import torchvision` succeed; calling nms would still raise "no kernel".
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cat > "$site/_vlarl_torchvision_cpu.py" <<'SHIM'
"""Written by vlarl's scripts/reference/lerobot.sh: the schemas torchvision's missing _C.so would define."""
import torch

try:
    torch.ops.torchvision.nms
except (AttributeError, RuntimeError):
    LIB = torch.library.Library("torchvision", "DEF")  # kept alive: the definitions live as long as it
    LIB.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    LIB.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
SHIM
    echo "import _vlarl_torchvision_cpu" > "$site/_vlarl_torchvision_cpu.pth"
    "$venv/bin/python" - <<'PY'
import lerobot
from lerobot.datasets.lerobot_dataset import CODEBASE_VERSION, LeRobotDataset  # noqa: F401
print("lerobot", lerobot.__version__, "writes codebase", CODEBASE_VERSION)
PY
    # only this venv changes (CI builds other reference venvs beside this one; rlinf_env.sh, built after them,
    # links across all of .reference)
    python3 scripts/link_identical.py .venv "$venv"  # share identical files with .venv (CI disk)
    echo "$version" > "$stamp"
    echo "lerobot reference environment ready: $venv"
}

if [[ $WHICH == v21 || $WHICH == all ]]; then
    build .reference/lerobot_v21 lerobot-ref-v1 "lerobot==0.3.3" "datasets>=2.19,<=3.6.0" "av>=14.2,<16" \
        draccus==0.10.0
fi
if [[ $WHICH == v30 || $WHICH == all ]]; then
        # lerobot.utils.utils imports accelerate (torch-dependent: --no-deps, plus what it imports)
    build .reference/lerobot_v30 lerobot-ref-v1 "lerobot==0.4.4 accelerate>=1.10,<2" "datasets>=4.0,<5" \
        "av>=15,<16" draccus==0.10.0 pandas fsspec psutil pyyaml safetensors
fi
