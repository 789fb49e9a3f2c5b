"""Two simulators of DIFFERENT scenes in ONE worker process render their own scenes.

robosuite renders into whichever GL context is current and frees GL objects in it; env.py makes each
env's context current before rendering and closing. Measured without that: the first env of a worker,
rendered after the second was built, comes out as garbage (82k of 98k values differ).
Reference: the same two episodes with one env per worker process.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

pytestmark = pytest.mark.libero

# libero_130 ids: task 0 (libero_spatial task 0) trial 0 and task 20 (libero_goal task 0) trial 0
RESET_IDS = [0, 20 * 50]


def _run(num_workers: int) -> list[dict]:
    spec = VectorEnvSpec(suite="libero_130", num_envs=2, num_workers=num_workers, settle_steps=2)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(2, 3, 7))
    actions[..., -1] = -1.0
    with LiberoVectorEnv(spec) as vec:
        first = vec.reset(RESET_IDS)
        stepped, _, _, _ = vec.step_chunk(actions)
    return [first, stepped]


def test_two_scenes_in_one_worker_match_one_env_per_worker(libero_ready):
    separate = _run(num_workers=2)
    shared = _run(num_workers=1)
    for a, b in zip(separate, shared, strict=True):
        assert a[keys.TASK_DESCRIPTIONS] == b[keys.TASK_DESCRIPTIONS]
        for key in (keys.MAIN_IMAGES, keys.WRIST_IMAGES, keys.STATES):
            assert torch.equal(a[key], b[key]), key
    # the two scenes really differ
    assert not torch.equal(shared[0][keys.MAIN_IMAGES][0], shared[0][keys.MAIN_IMAGES][1])
