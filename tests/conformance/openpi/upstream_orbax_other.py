"""Writes, with orbax's own PyTreeCheckpointer (.reference/openpi), a small JAX checkpoint of ANOTHER model:
a PaliGemma-only tree as openpi's pi0-FAST has (no action expert, no action_in_proj), for the bad-input
tests of ``vlarl convert``. Usage: ``python upstream_orbax_other.py <folder>`` (writes <folder>/params)."""

from __future__ import annotations

import sys

import numpy as np
import orbax.checkpoint as ocp


def main() -> None:
    rng = np.random.default_rng(0)
    tree = {"params": {"PaliGemma": {"llm": {"embedder": {"input_embedding": rng.standard_normal((16, 8))},
                                             "final_norm": {"scale": np.zeros(8)}},
                                     "img": {"head": {"kernel": rng.standard_normal((4, 8)), "bias": np.zeros(8)}}}}}
    with ocp.PyTreeCheckpointer() as checkpointer:
        checkpointer.save(sys.argv[1] + "/params", tree)


if __name__ == "__main__":
    main()
