#!/usr/bin/env bash
# Build .reference/openpi: an ISOLATED venv holding openpi's own PyTorch pi0 / pi0.5 (PI0Pytorch) and its JAX
# Pi0 / Pi05 (openpi/models/pi0.py, with the orbax checkpoint writer) for the
# conformance tests in tests/conformance/openpi/. Never touches the project's venv.
#
# What and why (REFERENCE.md section 7): PyPI carries openpi's PyTorch model as rlinf-openpi 0.1.1 and
# its patched transformers (openpi's transformers_replace applied to 4.53.2) as
# rlinf-transformer-openpi 4.53.2. Both are installed --no-deps (their declared dependencies would pull a
# CUDA torch and the full jax stack); the imports need only the packages listed below. torch==2.13.0 is
# the local CPU wheel. Idempotent: a stamp file records a finished build; re-running is a no-op.
#
# Usage: bash scripts/reference/openpi.sh      (then .reference/openpi/bin/python exists)
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.reference/openpi
STAMP="$VENV/.vlarl-reference-stamp"
VERSION="openpi-ref-v4"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
    echo "openpi reference environment ready: $VENV"
    exit 0
fi
PY=${PYTHON:-python3}
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"  # every step below is idempotent: an update reuses it
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" --no-deps "rlinf-openpi==0.1.1" "rlinf-transformer-openpi==4.53.2"
# RLinf itself, for its critic module (rlinf/models/embodiment/modules/value_head.py imports only torch)
"${PIP[@]}" --no-deps "rlinf==0.3.0"
"${PIP[@]}" "numpy<2" "huggingface-hub>=0.30,<1.0" "tokenizers>=0.21,<0.22" safetensors pyyaml regex requests \
    tqdm packaging sentencepiece pytest
# openpi.models imports jax for its (unused here) JAX side; CPU jaxlib, then re-pin what jax moved
"${PIP[@]}" "jax==0.5.3" "jaxlib==0.5.3"
"${PIP[@]}" "numpy==1.26.4" "ml-dtypes<0.6" "scipy<1.17"
"${PIP[@]}" --no-deps "flax==0.10.2" "beartype==0.19.0" "jaxtyping==0.2.36" einops msgpack absl-py rich \
    "orbax-checkpoint==0.11.13" optax chex toolz augmax etils nest_asyncio humanize tensorstore simplejson \
    protobuf typing_extensions wadler_lindig markdown-it-py mdurl pygments opt_einsum tqdm-loggable
# openpi.training.checkpoints (the JAX trainer's orbax writer, used to write test checkpoints) imports
# openpi.shared.normalize, which needs pydantic and numpydantic (--no-deps: it would lift numpy to 2.x)
"${PIP[@]}" "pydantic>=2,<3"
"${PIP[@]}" --no-deps "numpydantic==1.10.0"
# RLinf's openpi wrapper (rlinf/models/embodiment/openpi/openpi_action_model.py, whose flow log-probs
# test_rlinf_flow_logprobs.py runs) imports omegaconf and openpi.transforms (openpi-client, PIL)
"${PIP[@]}" --no-deps "omegaconf==2.3.0" "antlr4-python3-runtime==4.9.3" "openpi-client==0.1.2" pillow
"$VENV/bin/python" - <<'PY'
import torch
from openpi.models_pytorch.pi0_pytorch import PI0Pytorch  # noqa: F401
from openpi.models import pi0_config  # noqa: F401
from openpi.models.tokenizer import PaligemmaTokenizer  # noqa: F401
from openpi.models import pi0  # noqa: F401  (the JAX model of the JAX conformance tests)
import openpi.shared.normalize  # noqa: F401
import numpy
assert numpy.__version__ == "1.26.4", numpy.__version__
import importlib.util
assert importlib.util.find_spec("rlinf") is not None
import transformers
assert transformers.__version__ == "4.53.2", transformers.__version__
print("openpi reference imports: torch", torch.__version__, "transformers", transformers.__version__)
PY
# only this venv changes (CI builds other reference venvs beside this one; rlinf_env.sh, built after them,
# links across all of .reference)
python3 scripts/link_identical.py .venv "$VENV"   # share identical files with .venv (CI disk)
echo "$VERSION" > "$STAMP"
echo "openpi reference environment ready: $VENV"
