"""vlarl's LIBERO worker on LIBERO-Plus suites against LIBERO-Plus's own env driven the README's way, side by side.

Both run in LIBERO-Plus's environment (``vlarl setup-sim libero_plus``): the reference side (``plus_side.py``)
builds LIBERO-Plus's ``OffScreenRenderEnv`` from the task's file name, ``env.seed(7)``, ``reset()``,
``set_init_state`` of the base task's init state 0, 10 settle steps ``[0,0,0,0,0,0,-1]``, then 10 fixed random
actions; vlarl plays the same episode through ``LiberoVectorEnv`` (standard protocol, ``python: libero_plus``).
Compared: the instruction (LIBERO-Plus's ``task.language``; for ``_language_`` tasks the bddl's), the first
observation the policy sees and the last one (both images bit-exact after vlarl's 180-degree rotation), per-step
reward and success. The noise case checks that vlarl's per-env numpy streams give the corruption the same random
draws (motion blur angles) as one env in one process; the robot case that the robot class is ``MountedPanda<i>``;
the language case that the instruction is the bddl's, as the env parses it.

Skips without the environment (its build needs a clone of LIBERO-Plus; CI has none). About 1-2 minutes per case
on the 2 shared cores (two simulators are built).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from vlarl_cli import keys
from vlarl_cli.envs import interpreter

pytestmark = pytest.mark.libero

HERE = Path(__file__).parent
RES, STEPS = 128, 10
CASES = [("libero_plus_spatial_noise", 0), ("libero_plus_goal_robot", 0), ("libero_plus_goal_language", 0)]


@pytest.mark.parametrize(("suite", "task"), CASES)
def test_plus_episode_matches_libero_plus_own_env(suite: str, task: int, tmp_path: Path) -> None:
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.setup import prepare_libero
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

    if not interpreter.finished("libero_plus"):
        pytest.skip("no LIBERO-Plus environment: build it with `vlarl setup-sim libero_plus`")
    prepare_libero()  # LIBERO's config (no prompt on import) and the GL backend, inherited by both sides
    info = suites.get_task(suite, task)
    actions = np.random.default_rng(3).uniform(-0.4, 0.4, size=(STEPS, 7)).astype(np.float32)
    actions[:, -1] = np.where(np.arange(STEPS) < STEPS // 2, -1.0, 1.0)
    np.save(tmp_path / "actions.npy", actions.astype(np.float64))
    done = subprocess.run([str(interpreter.resolve("libero_plus")), str(HERE / "plus_side.py"), str(tmp_path / "ref.npz"),
                           "--bddl", str(info.bddl_file), "--init", str(info.init_states_file),
                           "--actions", str(tmp_path / "actions.npy"), "--resolution", str(RES)],
                          env={**os.environ, **interpreter.child_env()}, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(tmp_path / "ref.npz") as archive:
        ref = {k: archive[k] for k in archive.files}
    spec = VectorEnvSpec(suite=suite, task_ids=(task,), num_envs=1, num_workers=1, resolution=RES, env_seed=7,
                         max_episode_steps=5 * STEPS, init_state_order="ordered", python="libero_plus")
    with LiberoVectorEnv(spec) as vec:
        first = vec.reset()
        last, rewards, _dones, infos = vec.step_chunk(actions[None])
    if "_robot_" in suite:
        assert str(ref["robot"]) == f"MountedPanda{plus_robot(info.name)}"
    assert first[keys.TASK_DESCRIPTIONS] == [info.language]
    if "_language_" in suite:  # LIBERO-Plus's task.language of a _language_ task is its bddl's (:language)
        assert info.language == str(ref["language"]) and " view " not in info.language
    for when, obs in (("first", first), ("last", last)):
        for ours, theirs in ((keys.MAIN_IMAGES, "main"), (keys.WRIST_IMAGES, "wrist")):
            np.testing.assert_array_equal(obs[ours][0].numpy(), ref[f"{when}_{theirs}"][::-1, ::-1], err_msg=f"{when} {ours}")
    np.testing.assert_array_equal(rewards[0].numpy(), ref["rewards"].astype(np.float32))
    np.testing.assert_array_equal(infos[keys.SUCCESS][0].numpy(), ref["successes"])


def plus_robot(name: str) -> int:
    return int(name.rsplit("_initstate_", 1)[1].split("_")[0])
