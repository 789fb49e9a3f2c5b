#!/usr/bin/env bash
# Re-record the GR00T golden fixtures (tests/fixtures/gr00t/) by running Isaac-GR00T's own processors and
# action heads, N1.6's Eagle 3 backbone run with SDPA (eagle_n16.npz) and RLinf 0.3.0's GR00T RL heads
# (rlinf.npz), outside the project. NOT run by CI: the goldens are committed data; this documents how
# they were produced and reproduces them.
#
#   GR00T_N15_SRC=/path/to/Isaac-GR00T@n1.5-release  GR00T_N16_SRC=/path/to/Isaac-GR00T@n1.6.1-release \
#       bash scripts/reference/gr00t_golden.sh
#
# The two source trees are checkouts of https://github.com/NVIDIA/Isaac-GR00T branch n1.5-release
# (4af2b622892f7dcb5aae5a3fb70bcb02dc217b96) and RLinf's fork https://github.com/RLinf/Isaac-GR00T branch
# n1.6.1-release (5dc80c4afd726b34faad1d8f7e007a13b34e4c88), the branches RLinf's requirements/install.sh
# installs. The venv .reference/gr00t/ (gitignored) gets the versions RLinf pins for GR00T
# (requirements/embodied/models/gr00t.txt: transformers 4.51.3, albumentations 1.4.18, diffusers 0.30.2)
# beside the project's CPU torch 2.13.0.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VENV="$ROOT/.reference/gr00t"
STAMP="$VENV/.vlarl-stamp-1"
: "${GR00T_N15_SRC:?set GR00T_N15_SRC to an Isaac-GR00T n1.5-release checkout}"
: "${GR00T_N16_SRC:?set GR00T_N16_SRC to an Isaac-GR00T n1.6.1-release checkout}"
if [ ! -f "$STAMP" ]; then
    python3 -m venv "$VENV"
    PIP="$VENV/bin/pip"
    "$PIP" install -q torch==2.13.0 "numpy==1.26.4"
    "$PIP" install -q --no-deps torchvision==0.28.0 transformers==4.51.3 diffusers==0.30.2 albumentations==1.4.18 \
        albucore==0.0.17
    "$PIP" install -q "tokenizers>=0.21,<0.22" "huggingface-hub>=0.30,<1.0" safetensors regex pyyaml requests tqdm \
        packaging filelock fsspec jinja2 pillow "opencv-python-headless==4.11.0.86" "scipy<1.17" "scikit-image<0.26" "pydantic==2.10.6" \
        eval-type-backport einops importlib-metadata dm-tree typing-extensions
    "$PIP" install -q --no-deps numpydantic==1.6.7 decord==0.6.0 av==15.1.0 lmdb==1.7.5
    touch "$STAMP"
fi
# RLinf's GR00T RL heads (gr00t_rlinf.py): the wheel without its dependencies (Ray, its training stack); the RL
# head files import only omegaconf beyond the above. gr00t_eagle.py: timm
if [ ! -f "$VENV/.vlarl-stamp-rlinf-1" ]; then
    "$VENV/bin/pip" install -q --no-deps rlinf==0.3.0 omegaconf==2.4.0 antlr4-python3-runtime==4.13.2 \
        timm==1.0.14  # timm: imported by N1.5's radio_model.py (gr00t_eagle.py), Isaac-GR00T n1.5's pin
    touch "$VENV/.vlarl-stamp-rlinf-1"
fi
"$VENV/bin/python" "$ROOT/scripts/reference/gr00t_golden.py" --n15 "$GR00T_N15_SRC" --n16 "$GR00T_N16_SRC" \
    --out "$ROOT/tests/fixtures/gr00t"
"$VENV/bin/python" "$ROOT/scripts/reference/gr00t_eagle.py" --n15 "$GR00T_N15_SRC" --n16 "$GR00T_N16_SRC" --out "$ROOT/tests/fixtures/gr00t"
RLINF_PKG="$("$VENV/bin/python" -c 'import importlib.util as u; print(u.find_spec("rlinf").submodule_search_locations[0])')"
exec "$VENV/bin/python" "$ROOT/scripts/reference/gr00t_rlinf.py" --n15 "$GR00T_N15_SRC" --n16 "$GR00T_N16_SRC" \
    --rlinf "$RLINF_PKG" --out "$ROOT/tests/fixtures/gr00t"
