"""RLinf's own flow log-probs (rlinf 0.3.0 ``models/embodiment/openpi/openpi_action_model.py``:
``get_log_prob_value`` -> ``sample_mean_var_val`` -> ``get_logprob_norm``): runs under .reference/openpi.

Usage: ``python upstream_rlinf_flow.py <spec.json>``. The methods are RLinf's, called on a stand-in for the
model object that supplies only what they read: the config fields (noise method, steps, joint mode, noise
level), no value head, no prefix (``_build_prefix_cache`` returns nothing) and a velocity given as a closed
form of (x, t) that the vlarl side computes too, so only the flow math is compared. ``rlinf``'s package
``__init__`` (which pulls in ray / hydra) is skipped by registering its package folders directly.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def _rlinf_model_class():
    root = Path(importlib.util.find_spec("openpi").submodule_search_locations[0]).parent / "rlinf"
    for name in ("rlinf", "rlinf.models", "rlinf.models.embodiment", "rlinf.utils"):
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        sys.modules[name] = module
    from rlinf.models.embodiment.openpi.openpi_action_model import OpenPi0ForRLActionPrediction

    return OpenPi0ForRLActionPrediction


def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The shared stand-in velocity (the vlarl side has the same formula)."""
    return torch.sin(1.3 * x) - 0.2 * x + 0.7 * t[:, None, None]


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    cls = _rlinf_model_class()
    x = load_file(spec["inputs"])
    out = {}
    for case in spec["cases"]:
        cfg = types.SimpleNamespace(noise_method=case["method"], num_steps=case["steps"],
                                    joint_logprob=case["joint"], add_value_head=False, value_after_vlm=False,
                                    safe_get_logprob=False, noise_level=case["noise_level"], noise_anneal=False)
        model = types.SimpleNamespace(config=cfg, use_vlm_value=False)
        for name in ("_get_noise_level", "_get_timesteps", "sample_mean_var_val", "get_logprob_norm",
                     "gaussian_entropy"):
            setattr(model, name, types.MethodType(getattr(cls, name), model))
        model._build_prefix_cache = lambda *args: (None, None, None)
        model.get_velocity = lambda state, x_t, t, pad, cache: (velocity(x_t, t), None)
        chain = x[f"chain_k{case['steps']}"]
        inds = x["denoise_index"][:, None].repeat(1, case["steps"])  # RLinf: one index per row, repeated
        if case["joint"]:
            inds = torch.arange(case["steps"])[None].repeat(chain.shape[0], 1)
        logp, _, _ = cls.get_log_prob_value(model, None, None, None, None, x["state"], chain, inds)
        out[case["name"]] = logp.contiguous()  # [B, 1 | K+1, H, D]
    save_file(out, spec["out"])


if __name__ == "__main__":
    main()
