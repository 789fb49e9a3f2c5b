#!/usr/bin/env bash
# Isolated environment with RLinf 0.3.0's OpenVLA-OFT model code and algorithm functions, and verl 0.9.1's
# core_algos, for the conformance tests in tests/conformance/rlinf_oft/, rlinf_algos/ and verl_algos/ (never the
# project's venv). Idempotent: a stamp file records a finished build.
#
#   bash scripts/reference/rlinf_models.sh        # -> .reference/rlinf_models/bin/python
#
# rlinf is installed --no-deps with only what rlinf/models/embodiment/openvla_oft and prismatic import.
# Versions: transformers 4.40.1 + tokenizers 0.19.1 + timm 0.9.10 are the pins of the OpenVLA-OFT code
# RLinf runs (openvla-oft pyproject.toml; its modeling refuses other timm versions); torch 2.13.0 is the
# local CPU wheel (torchvision 0.28.0 is its release twin, --no-deps; timm imports it). openvla-oft's own `prismatic` package is not on PyPI: the tests put a stand-in written
# from facts (tests/conformance/rlinf_oft/prismatic_standin) on the path, see the test module.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.reference/rlinf_models
STAMP="$VENV/.stamp-v2"
if [[ -f "$STAMP" ]]; then
    echo "rlinf_models reference environment ready: $VENV/bin/python"
    exit 0
fi
python3 -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install --quiet "torch==2.13.0"
"$PIP" install --quiet "numpy<2" "transformers==4.40.1" "tokenizers==0.19.1" "huggingface-hub>=0.19,<1.0" \
    "safetensors>=0.4" "timm==0.9.10" "omegaconf>=2.3" "pillow" "pyyaml" "regex" "requests" "tqdm" \
    "packaging" "filelock" "torchvision==0.28.0" "urllib3" "idna" "charset-normalizer" "certifi" "fsspec" --no-deps
"$PIP" install --quiet --no-deps "rlinf==0.3.0"
# verl's core_algos (tests/conformance/verl_algos/run_verl.py imports `verl` as a bare namespace, so its
# Ray-starting package __init__ never runs); these are the modules its import chain needs, nothing more
"$PIP" install --quiet --no-deps "verl==0.9.1" "tensordict==0.15.3" "pyvers==0.2.3" "cloudpickle==3.1.3" \
    "codetiming==1.4.0" "orjson==3.13.0" "msgpack==1.2.4"
# PyPI's torchvision is built against CUDA torch: its C ops do not load beside the CPU torch and its meta
# registrations then fail at import; tests/conformance/rlinf_oft/run_rlinf.py skips that module (timm only
# needs torchvision's pure-Python parts). The same check here:
"$VENV/bin/python" -c "import sys, types; sys.modules['torchvision._meta_registrations'] = types.ModuleType('m'); \
import transformers, timm, omegaconf; print('transformers', transformers.__version__, 'timm', timm.__version__)"
"$VENV/bin/python" tests/conformance/verl_algos/run_verl.py --check
# only this venv changes (CI builds other reference venvs beside this one; rlinf_env.sh, built after them,
# links across all of .reference)
python3 scripts/link_identical.py .venv "$VENV"   # share identical files with .venv (CI disk)
touch "$STAMP"
echo "rlinf_models reference environment ready: $VENV/bin/python"
