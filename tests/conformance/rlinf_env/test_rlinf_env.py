"""vlarl's LIBERO vector env under the ``rlinf`` protocol against RLinf 0.3.0's own ``LiberoEnv``.

Both run libero_spatial task 0 in training mode (auto-reset, fixed reset-state ids drawn at random from
``seed``, ``use_rel_reward``, ``use_step_penalty``, ``reward_coef`` 5, 15 settle steps with the gripper
open, 128 px, step limit 176) and get the same action chunks (C = 8): the scripted expert's recorded
actions (an episode that succeeds at step 162), then small random actions until the step limit (an
episode that times out), then one chunk of the third episode. Each episode starts through an auto-reset
that draws a new reset-state id.

Compared chunk by chunk: the reset-state ids RLinf and vlarl draw, observations (both images bit-exact,
the 8-d state to float32), per-step rewards, the success step, terminations, truncations and the episode
metrics. Differences, each deliberate and asserted as such:

1. RLinf executes the rest of a chunk after an episode ended (the chunk is stepped as a whole, the
   auto-reset comes after it); vlarl stops at the step that ends it. RLinf's rewards for those steps are
   0 (the success persists, so the relative reward does not change), the same as vlarl's padding zeros.
2. With auto-reset, RLinf reports a chunk's termination / truncation on its LAST step; vlarl on the step
   where it happened (``dones`` stays True from there).
3. RLinf's ``episode_len`` counts those extra steps (it is the elapsed steps at the chunk's end); vlarl's
   is the step where the episode ended.
4. RLinf returns float64 states; vlarl float32 (the same values rounded).

A second test runs the same expert episode WITHOUT auto-reset (per-step dones and rewards, from which the loss masks
come; see its docstring for the one deliberate difference).

Needs ``.reference/rlinf_env`` (``bash scripts/reference/rlinf_env.sh``). About 2-4 minutes on 2 cores each.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from vlarl_cli import keys

pytestmark = pytest.mark.libero

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
REF_PYTHON = ROOT / ".reference" / "rlinf_env" / "bin" / "python"
CHUNK = 8
# the expert succeeds at step 162, inside the 21st chunk (steps 161-168); a limit inside that chunk would
# make RLinf report a truncation as well (it keeps stepping after the success), vlarl not (difference 1)
MAX_STEPS = 176
RES = 128


def _reference_or_skip() -> Path:
    if REF_PYTHON.is_file():
        return REF_PYTHON
    message = "RLinf reference env missing: run `bash scripts/reference/rlinf_env.sh`"
    if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _libero_or_skip() -> None:
    try:
        from vlarl_cli.envs.libero.setup import prepare_libero

        prepare_libero()
    except Exception as err:  # missing assets or no GL backend
        if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
            raise
        pytest.skip(f"LIBERO not usable: {err}")


def _chunks() -> tuple[np.ndarray, int]:
    """[K, C, 7]: the expert's episode padded with its last action, a random timeout episode, one more."""
    rec = np.load(HERE / "expert_actions.npz")
    expert = rec["actions"]
    pad = -len(expert) % CHUNK
    first = np.concatenate([expert, np.repeat(expert[-1:], pad, axis=0)])
    rng = np.random.default_rng(0)
    timeout = rng.uniform(-0.3, 0.3, size=(MAX_STEPS + CHUNK, 7))
    timeout[:, -1] = -1.0
    return np.concatenate([first, timeout]).reshape(-1, CHUNK, 7), int(rec["seed"])


def _reference_libero_config(tmp_path: Path) -> Path:
    """LIBERO's config.yaml for the reference venv's own libero package (its files, not the project's)."""
    (package,) = (ROOT / ".reference" / "rlinf_env").glob("lib/python3*/site-packages/libero/libero")
    config = tmp_path / "libero_config"
    config.mkdir()
    entries = {"benchmark_root": package, "bddl_files": package / "bddl_files", "init_states": package / "init_files",
               "datasets": package.parent / "datasets", "assets": package / "assets"}
    (config / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in entries.items()))
    return config


def _run_rlinf(chunks: np.ndarray, seed: int, tmp_path: Path, auto_reset: bool = True) -> subprocess.Popen:
    from vlarl_cli.envs.libero.setup import prepare_libero

    gl = prepare_libero().mujoco_gl  # the same rendering backend on both sides
    np.savez(tmp_path / "chunks.npz", chunks=chunks)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=str(HERE), LIBERO_CONFIG_PATH=str(_reference_libero_config(tmp_path)),
               MUJOCO_GL=gl, OMP_NUM_THREADS="1")
    args = [str(REF_PYTHON), str(HERE / "rlinf_side.py"), str(tmp_path / "chunks.npz"), str(tmp_path / "rlinf.npz"),
            str(seed), str(MAX_STEPS), str(RES), str(int(auto_reset))]
    return subprocess.Popen(args, env=env, stdout=open(tmp_path / "rlinf.log", "w"), stderr=subprocess.STDOUT)


def _run_ours(chunks: np.ndarray, seed: int, auto_reset: bool = True) -> dict[str, list]:
    from vlarl_cli.envs.vector import EPISODE_DONE, RESET_STATE_IDS, LiberoVectorEnv, VectorEnvSpec

    spec = VectorEnvSpec(
        suite="libero_spatial", task_ids=(0,), num_envs=1, num_workers=1, resolution=RES, protocol="rlinf",
        max_episode_steps=MAX_STEPS, seed=seed, env_seed=seed, auto_reset=auto_reset, init_state_order="random",
        reward_coef=5.0, use_rel_reward=True, step_penalty=1.0,
    )
    out: dict[str, list] = {k: [] for k in ("obs", "rewards", "dones", "success", "truncated", "episode", "ids")}
    with LiberoVectorEnv(spec) as vec:
        out["obs0"] = [vec.reset()]
        out["id0"] = [int(vec.reset_state_ids[0])]
        for chunk in chunks:
            obs, rewards, dones, infos = vec.step_chunk(chunk[None])
            out["obs"].append(obs)
            out["rewards"].append(rewards[0].numpy())
            out["dones"].append(dones[0].numpy())
            out["success"].append(infos[keys.SUCCESS][0].numpy())
            out["truncated"].append(infos[keys.TRUNCATED][0].numpy())
            ended = bool(infos[EPISODE_DONE][0])
            out["episode"].append({k: infos[k][0].item() for k in (keys.SUCCESS_ONCE, keys.RETURN, keys.EPISODE_LEN)}
                                  if ended else None)
            out["ids"].append(int(infos[RESET_STATE_IDS][0]))
    return out


def _assert_same_obs(ours: dict, main: np.ndarray, wrist: np.ndarray, state: np.ndarray, where: str) -> None:
    np.testing.assert_array_equal(ours[keys.MAIN_IMAGES][0].numpy(), main, err_msg=f"main image, {where}")
    np.testing.assert_array_equal(ours[keys.WRIST_IMAGES][0].numpy(), wrist, err_msg=f"wrist image, {where}")
    # difference 4: RLinf's state is float64, ours the same values in float32
    np.testing.assert_array_equal(ours[keys.STATES][0].numpy(), state.astype(np.float32), err_msg=f"state, {where}")


def test_vlarl_rlinf_protocol_equals_rlinf_libero_env(tmp_path):
    ref = _reference_or_skip()
    assert ref.is_file()
    _libero_or_skip()
    chunks, seed = _chunks()
    proc = _run_rlinf(chunks, seed, tmp_path)  # runs beside ours: two processes, two cores
    try:
        ours = _run_ours(chunks, seed)
    finally:
        code = proc.wait(timeout=1800)
    log = (tmp_path / "rlinf.log").read_text()
    assert code == 0, f"RLinf side failed:\n{log[-4000:]}"
    theirs = dict(np.load(tmp_path / "rlinf.npz"))

    # the first reset: the same drawn reset-state id, seed, settle steps -> the same first observation
    assert ours["id0"][0] == int(theirs["id0"]) == int(np.load(HERE / "expert_actions.npz")["trial"])
    _assert_same_obs(ours["obs0"][0], theirs["main0"], theirs["wrist0"], theirs["state0"], "first reset")

    ends = []
    for k in range(len(chunks)):
        where = f"chunk {k}"
        done, r_ours, r_theirs = ours["dones"][k], ours["rewards"][k], theirs["rewards"][k]
        ended = bool(done.any())
        assert ended == bool(theirs["terminations"][k][-1] or theirs["truncations"][k][-1]), where
        # difference 2: RLinf flags the chunk's last step only
        assert not theirs["terminations"][k][:-1].any() and not theirs["truncations"][k][:-1].any(), where
        assert bool(ours["truncated"][k].any()) == bool(theirs["truncations"][k][-1]), where
        first_success = np.flatnonzero(theirs["success"][k])
        if ended:
            stop = int(np.argmax(done)) + 1  # steps vlarl executed in this chunk
            # difference 1: RLinf's rewards after the end are 0, as vlarl's padding
            np.testing.assert_array_equal(r_theirs[stop:], 0.0, err_msg=where)
            ep, k_first = ours["episode"][k], first_success[0] if len(first_success) else None
            assert ep[keys.SUCCESS_ONCE] == bool(theirs["ep_success_once"][k]), where
            assert ep[keys.RETURN] == pytest.approx(float(theirs["ep_return"][k]), abs=1e-5), where
            # difference 3: RLinf counts the whole chunk, vlarl the step where the episode ended
            assert int(theirs["ep_len"][k]) == (k + 1 - (ends[-1] + 1 if ends else 0)) * CHUNK, where
            assert ep[keys.EPISODE_LEN] == int(theirs["ep_len"][k]) - CHUNK + stop, where
            if k_first is not None:
                assert stop == k_first + 1 and ours["success"][k][k_first], where
            ends.append(k)
        else:
            assert not len(first_success) and not ours["success"][k].any(), where
        np.testing.assert_allclose(r_ours, r_theirs, atol=1e-6, err_msg=where)
        # after an auto-reset both show the next episode's first observation, from a NEW drawn id
        assert ours["ids"][k] == int(theirs["ids"][k]), where
        _assert_same_obs(ours["obs"][k], theirs["main"][k], theirs["wrist"][k], theirs["state"][k], where)

    # the three episodes happened: success at step 162 (chunk 20), timeout 22 chunks later, a third one
    assert ends == [20, 42], ends
    assert ours["episode"][20][keys.SUCCESS_ONCE] and ours["episode"][20][keys.EPISODE_LEN] == 162
    assert not ours["episode"][42][keys.SUCCESS_ONCE] and ours["episode"][42][keys.EPISODE_LEN] == MAX_STEPS
    # rewards: -1 on each episode's first step (penalty before the relative change), +5 on the success
    assert ours["rewards"][0][0] == -1.0 and ours["rewards"][20][1] == 5.0 and ours["rewards"][21][0] == -1.0
    assert len({ours["id0"][0], ours["ids"][20], ours["ids"][42]}) > 1  # new ids were drawn


def test_no_auto_reset_dones_and_rewards_equal_rlinf(tmp_path):
    """Without auto-reset (RLinf ``auto_reset: False``), where the loss masks come from per-step dones: the
    expert episode, then one chunk holding its last action (176 steps, the limit). RLinf reports raw per-step
    terminations (the success persists, so every step from the success on) and keeps stepping the finished env
    with reward 0; vlarl stops the env at the success step, its ``dones`` True from there and its rewards 0
    (padding). Both agree step by step on rewards and dones, on observations until the episode ends, and
    neither resets. Deliberate difference: RLinf also truncates the finished env at the step limit. About
    2-5 minutes on 2 busy cores (one LIBERO episode on each side, in parallel)."""
    ref = _reference_or_skip()
    assert ref.is_file()
    _libero_or_skip()
    rec = np.load(HERE / "expert_actions.npz")
    chunks, seed = _chunks()
    chunks = np.concatenate([chunks[:21], np.repeat(chunks[20][-1:], CHUNK, axis=0)[None]])  # 176 steps
    proc = _run_rlinf(chunks, seed, tmp_path, auto_reset=False)
    try:
        ours = _run_ours(chunks, seed, auto_reset=False)
    finally:
        code = proc.wait(timeout=1800)
    assert code == 0, f"RLinf side failed:\n{(tmp_path / 'rlinf.log').read_text()[-4000:]}"
    theirs = dict(np.load(tmp_path / "rlinf.npz"))
    assert ours["id0"][0] == int(theirs["id0"]) == int(rec["trial"])
    for k in range(len(chunks)):
        where = f"chunk {k}"
        np.testing.assert_allclose(ours["rewards"][k], theirs["rewards"][k], atol=1e-6, err_msg=where)
        rlinf_done = theirs["terminations"][k] | theirs["truncations"][k]  # raw per step without auto-reset
        np.testing.assert_array_equal(ours["dones"][k], rlinf_done, err_msg=where)
        # RLinf's elapsed steps keep counting in the finished env: it truncates at step MAX_STEPS (the last step of
        # chunk 21) although the episode ended at 162; vlarl reports no truncation for a finished env
        assert theirs["truncations"][k].tolist() == [k == 21 and i == CHUNK - 1 for i in range(CHUNK)], where
        assert not ours["truncated"][k].any(), where
        assert ours["ids"][k] == int(theirs["ids"][k]) == ours["id0"][0], where  # no reset on either side
        if k < 20:  # after the success RLinf's env moves on (vlarl's is stopped): observations until then
            _assert_same_obs(ours["obs"][k], theirs["main"][k], theirs["wrist"][k], theirs["state"][k], where)
    assert int(np.argmax(ours["dones"][20])) == 1 and ours["rewards"][20][1] == 5.0  # success at step 162
    assert ours["dones"][21].all() and not ours["rewards"][21].any()
    ep = ours["episode"][20]
    assert ep[keys.SUCCESS_ONCE] and ep[keys.EPISODE_LEN] == 162
    assert ep[keys.RETURN] == pytest.approx(float(theirs["ep_return"][20]), abs=1e-5)
    assert ours["episode"][21] is None  # one episode, reported once
