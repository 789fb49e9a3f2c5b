"""vlarl's LIBERO vector env under the ``rlinf`` protocol against RLinf 0.3.0's own ``LiberoEnv``.

One RLinf process (``rlinf_side.py``, started once for this module by the ``runs`` fixture) builds two
``LiberoEnv`` objects of NUM_ENVS envs each in training mode (libero_spatial, ``task_id_filter`` TASKS = two
tasks, fixed reset-state ids drawn at random from SEED, ``use_rel_reward``, ``use_step_penalty``,
``reward_coef`` 5, 15 settle steps with the gripper open, 128 px, step limit MAX_STEPS): one with auto-reset,
one without. vlarl then runs the same two setups with ``LiberoVectorEnv`` (a worker per env, so both cores
work) and the same action chunks (C = 8): env 0 gets the scripted expert's
recorded actions (``expert_actions.npz``: its episode succeeds at step SUCCESS_STEP), env 1 small random actions
(an episode that reaches the step limit). The first reset starts the envs on both tasks (seeds ``seed * 2 + i``);
each auto-reset (env 0 after its success, env 1 at the limit, seeds ``seed * 1 + i``) draws new ids, which
move both envs to the other task (a rebuilt scene on both sides). The sides run one after the other, not side
by side: a LIBERO env with its renderer holds ~1.1 GB, and both at once would double the peak memory.

Compared chunk by chunk and env by env: the reset-state ids drawn and the (task, trial) each env runs, the
task descriptions, observations (both images bit-exact, the 8-d state to float32), per-step rewards, the
success step, terminations, truncations and the episode metrics. Differences, each deliberate and asserted
as such:

1. RLinf executes the rest of a chunk after an episode ended (the chunk is stepped as a whole, the
   auto-reset comes after it); vlarl stops at the step that ends it. RLinf's rewards for those steps are
   0 (the success persists, so the relative reward does not change), the same as vlarl's padding zeros.
2. With auto-reset, RLinf reports a chunk's termination / truncation on its LAST step; vlarl on the step
   where it happened (``dones`` stays True from there).
3. RLinf's ``episode_len`` counts those extra steps (it is the elapsed steps at the chunk's end); vlarl's
   is the step where the episode ended.
4. RLinf returns float64 states; vlarl float32 (the same values rounded).
5. An auto-reset in RLinf draws a new id for EVERY env (``update_reset_state_ids``) and starts only the
   finished envs from theirs: the running envs' ``reset_state_ids`` entries then name states they never
   started (their ``task_ids`` / ``trial_ids`` are unchanged). vlarl's ``reset_state_ids`` is the state each
   env started from, i.e. RLinf's (task, trial) of the env.
6. Without auto-reset RLinf keeps stepping a finished env (raw per-step terminations, reward 0) and truncates
   it at the step limit; vlarl stops it (``dones`` True, rewards 0 from the end), reports no truncation for it
   and keeps its last observation.

Needs ``.reference/rlinf_env`` (``bash scripts/reference/rlinf_env.sh``). One RLinf start and one set of scene
builds serve both tests (the fixture); the comparisons themselves are instant.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vlarl_cli import keys

pytestmark = pytest.mark.libero

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
REF_PYTHON = ROOT / ".reference" / "rlinf_env" / "bin" / "python"
EXPERT = np.load(HERE / "expert_actions.npz")
SEED = int(EXPERT["seed"])
TASKS = tuple(int(t) for t in EXPERT["task_ids"])  # libero_spatial tasks the ids are drawn from
NUM_ENVS = 2  # in each env object (with and without auto-reset)
CHUNK = 8
SUCCESS_STEP = int(EXPERT["success_step"])  # the expert's episode (env 0) succeeds here (and stays so)
SUCCESS_CHUNK = (SUCCESS_STEP - 1) // CHUNK
# the step limit: one chunk after the success chunk, so RLinf's steps after the success (difference 1) do not
# reach it (it would report a truncation as well, vlarl not)
MAX_STEPS = (SUCCESS_CHUNK + 2) * CHUNK
LIMIT_CHUNK = MAX_STEPS // CHUNK - 1  # the chunk whose last step is the limit
RES = 128
TRIALS = 50  # init states per libero_spatial task (RLinf's flat id = task * 50 + trial)


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


def _chunks(num_chunks: int, hold: bool) -> np.ndarray:
    """[K, N, C, 7]: env 0 the expert's actions to the end of its success chunk (``hold``: to the end; after the
    success it keeps the bowl on the plate, so the success persists: record_expert.py checks it), then small
    random actions with the gripper open, as every step of env 1."""
    rng = np.random.default_rng(0)
    actions = rng.uniform(-0.3, 0.3, size=(NUM_ENVS, num_chunks * CHUNK, 7))
    actions[:, :, -1] = -1.0
    expert = EXPERT["actions"]
    end = num_chunks * CHUNK if hold else (SUCCESS_CHUNK + 1) * CHUNK
    assert len(expert) >= end
    actions[0, :end] = expert[:end]
    return actions.reshape(NUM_ENVS, num_chunks, CHUNK, 7).transpose(1, 0, 2, 3).copy()


def _scenario() -> dict[str, Any]:
    # with auto-reset: up to the limit, then one chunk of the next episodes; without: up to the limit
    return {"seed": SEED, "max_steps": MAX_STEPS, "res": RES, "task_ids": np.array(TASKS),
            "on": _chunks(LIMIT_CHUNK + 2, hold=False), "off": _chunks(LIMIT_CHUNK + 1, hold=True)}


def _reference_libero_config(tmp_path: Path) -> Path:
    """LIBERO's config.yaml for the reference venv's own libero package (its files, not the project's)."""
    (package,) = (ROOT / ".reference" / "rlinf_env").glob("lib/python3*/site-packages/libero/libero")
    config = tmp_path / "libero_config"
    config.mkdir()
    entries = {"benchmark_root": package, "bddl_files": package / "bddl_files", "init_states": package / "init_files",
               "datasets": package.parent / "datasets", "assets": package / "assets"}
    (config / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in entries.items()))
    return config


def _start_rlinf(scenario: dict[str, Any], tmp_path: Path) -> subprocess.Popen:
    from vlarl_cli.envs.libero.setup import prepare_libero

    gl = prepare_libero().mujoco_gl  # the same rendering backend on both sides
    np.savez(tmp_path / "scenario.npz", **scenario)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=str(HERE), LIBERO_CONFIG_PATH=str(_reference_libero_config(tmp_path)),
               MUJOCO_GL=gl, OMP_NUM_THREADS="1")
    args = [str(REF_PYTHON), str(HERE / "rlinf_side.py"), str(tmp_path / "scenario.npz"), str(tmp_path / "rlinf.npz")]
    return subprocess.Popen(args, env=env, stdout=open(tmp_path / "rlinf.log", "w"), stderr=subprocess.STDOUT)


def _run_ours(chunks: np.ndarray, auto_reset: bool) -> dict[str, Any]:
    """vlarl's side of one run: the same fields as RLinf's, stacked per chunk ([K, N, ...])."""
    from vlarl_cli.envs.vector import EPISODE_DONE, RESET_STATE_IDS, LiberoVectorEnv, VectorEnvSpec

    num_envs = chunks.shape[1]
    spec = VectorEnvSpec(
        suite="libero_spatial", task_ids=TASKS, num_envs=num_envs, num_workers=num_envs,
        resolution=RES, protocol="rlinf", max_episode_steps=MAX_STEPS, seed=SEED, env_seed=SEED,
        auto_reset=auto_reset, init_state_order="random", reward_coef=5.0, use_rel_reward=True, step_penalty=1.0,
    )
    out: dict[str, list] = {}

    def keep(obs: dict[str, Any], **values: Any) -> None:
        values.update(main=obs[keys.MAIN_IMAGES].numpy(), wrist=obs[keys.WRIST_IMAGES].numpy(),
                      state=obs[keys.STATES].numpy(), task=np.array(obs[keys.TASK_DESCRIPTIONS]))
        for k, v in values.items():
            out.setdefault(k, []).append(np.asarray(v))

    with LiberoVectorEnv(spec) as vec:
        keep(vec.reset(), ids=vec.reset_state_ids)
        for chunk in chunks:
            obs, rewards, dones, infos = vec.step_chunk(chunk)
            keep(obs, rewards=rewards.numpy(), dones=dones.numpy(), success=infos[keys.SUCCESS].numpy(),
                 truncated=infos[keys.TRUNCATED].numpy(), episode_done=infos[EPISODE_DONE].numpy(),
                 ids=infos[RESET_STATE_IDS].numpy(),
                 **{k: infos[k].numpy() for k in (keys.SUCCESS_ONCE, keys.RETURN, keys.EPISODE_LEN)})
    first = {k + "0": v.pop(0) for k, v in out.items() if k in ("main", "wrist", "state", "task", "ids")}
    return {**first, **{k: np.stack(v) for k, v in out.items()}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Both runs on both sides: {"on" | "off": (vlarl's, RLinf's)}; RLinf first, then vlarl (peak memory)."""
    ref = _reference_or_skip()
    assert ref.is_file()
    _libero_or_skip()
    tmp_path = tmp_path_factory.mktemp("rlinf_env")
    scenario = _scenario()
    proc = _start_rlinf(scenario, tmp_path)
    try:
        code = proc.wait(timeout=1800)
    finally:
        proc.kill()  # a no-op once it has exited
    log = (tmp_path / "rlinf.log").read_text()
    assert code == 0, f"RLinf side failed:\n{log[-4000:]}"
    ours = {"on": _run_ours(scenario["on"], auto_reset=True), "off": _run_ours(scenario["off"], auto_reset=False)}
    saved = dict(np.load(tmp_path / "rlinf.npz"))
    return {name: (ours[name], {k[len(name) + 1:]: v for k, v in saved.items() if k.startswith(name + "_")})
            for name in ("on", "off")}


def _assert_same_obs(ours: dict, theirs: dict, k: int | None, e: int, where: str) -> None:
    """Env ``e``'s observation after chunk ``k`` (None: the first reset's) on both sides."""
    sfx, at = ("0", ()) if k is None else ("", (k,))
    for name in ("main", "wrist"):
        np.testing.assert_array_equal(ours[name + sfx][(*at, e)], theirs[name + sfx][(*at, e)],
                                      err_msg=f"{name} image, {where}")
    # difference 4: RLinf's state is float64, ours the same values in float32
    np.testing.assert_array_equal(ours["state" + sfx][(*at, e)], theirs["state" + sfx][(*at, e)].astype(np.float32),
                                  err_msg=f"state, {where}")
    assert ours["task" + sfx][(*at, e)] == theirs["task" + sfx][(*at, e)], where


def _running(theirs: dict, k: int | None = None) -> np.ndarray:
    """The flat ids of the (task, trial) RLinf's envs run after chunk ``k`` (None: the first reset)."""
    if k is None:
        return theirs["task_ids0"] * TRIALS + theirs["trial_ids0"]
    return theirs["task_ids"][k] * TRIALS + theirs["trial_ids"][k]


def _assert_first_reset(ours: dict, theirs: dict) -> None:
    """The first reset: the same drawn ids (env 0's is the expert's), seeds, settle steps -> observations."""
    np.testing.assert_array_equal(ours["ids0"], theirs["ids0"])
    np.testing.assert_array_equal(ours["ids0"], _running(theirs))
    np.testing.assert_array_equal(ours["ids0"], EXPERT["first_ids"])
    assert set(ours["ids0"] // TRIALS) == set(TASKS)  # both tasks from the start
    for e in range(NUM_ENVS):
        _assert_same_obs(ours, theirs, None, e, f"first reset, env {e}")


def _assert_auto_reset_chunk(ours: dict, theirs: dict, k: int, e: int, start: int) -> bool:
    """One env's chunk ``k`` with auto-reset (its episode started after chunk ``start - 1``); True if it ended."""
    where = f"auto-reset, chunk {k}, env {e}"
    done, r_ours, r_theirs = ours["dones"][k, e], ours["rewards"][k, e], theirs["rewards"][k, e]
    term, trunc = theirs["terminations"][k, e], theirs["truncations"][k, e]
    ended = bool(done.any())
    assert ended == bool(term[-1] or trunc[-1]) == bool(ours["episode_done"][k, e]), where
    # difference 2: RLinf flags the chunk's last step only
    assert not term[:-1].any() and not trunc[:-1].any(), where
    assert bool(ours["truncated"][k, e].any()) == bool(trunc[-1]), where
    first_success = np.flatnonzero(theirs["success"][k, e])
    if ended:
        stop = int(np.argmax(done)) + 1  # steps vlarl executed in this chunk
        # difference 1: RLinf's rewards after the end are 0, as vlarl's padding
        np.testing.assert_array_equal(r_theirs[stop:], 0.0, err_msg=where)
        assert ours[keys.SUCCESS_ONCE][k, e] == theirs["ep_success_once"][k, e], where
        # float32 (vlarl) against float64 sums of the same -1 / +5 / 0 rewards: equal
        assert ours[keys.RETURN][k, e] == theirs["ep_return"][k, e], where
        # difference 3: RLinf counts the whole chunk, vlarl the step where the episode ended
        assert theirs["ep_len"][k, e] == (k + 1 - start) * CHUNK, where
        assert ours[keys.EPISODE_LEN][k, e] == theirs["ep_len"][k, e] - CHUNK + stop, where
        if len(first_success):
            assert stop == first_success[0] + 1 and ours["success"][k, e][first_success[0]], where
        # the finished env starts the id RLinf drew for it
        assert ours["ids"][k, e] == theirs["ids"][k, e], where
    else:
        assert not len(first_success) and not ours["success"][k, e].any(), where
    # vlarl's rewards are float32 of RLinf's float64 -1 / +5 / 0 / -5: exact
    np.testing.assert_array_equal(r_ours, r_theirs.astype(np.float32), err_msg=where)
    # difference 5: vlarl's id is the state the env runs, RLinf's (task, trial)
    assert ours["ids"][k, e] == _running(theirs, k)[e], where
    # after an auto-reset both show the next episode's first observation
    _assert_same_obs(ours, theirs, k, e, where)
    return ended


def test_auto_reset_several_envs_equal_rlinf_libero_env(runs):
    ours, theirs = runs["on"]
    _assert_first_reset(ours, theirs)
    ends: dict[int, list[int]] = {e: [] for e in range(NUM_ENVS)}
    for k in range(len(ours["rewards"])):
        for e in range(NUM_ENVS):
            if _assert_auto_reset_chunk(ours, theirs, k, e, ends[e][-1] + 1 if ends[e] else 0):
                ends[e].append(k)
    # env 0: the expert's success; env 1 reaches the limit a chunk later (each reset alone: seed * 1 + i)
    assert ends == {0: [SUCCESS_CHUNK], 1: [LIMIT_CHUNK]}, ends
    assert ours[keys.SUCCESS_ONCE][SUCCESS_CHUNK, 0] and ours[keys.EPISODE_LEN][SUCCESS_CHUNK, 0] == SUCCESS_STEP
    assert ours[keys.RETURN][SUCCESS_CHUNK, 0] == 4.0  # -1 on the first step, +5 on the success
    assert not ours[keys.SUCCESS_ONCE][LIMIT_CHUNK, 1] and ours[keys.EPISODE_LEN][LIMIT_CHUNK, 1] == MAX_STEPS
    assert ours["truncated"][LIMIT_CHUNK, 1, -1] and ours[keys.RETURN][LIMIT_CHUNK, 1] == -1.0
    # rewards: -1 on each episode's first step (penalty before the relative change), +5 on the success
    assert (ours["rewards"][0, :, 0] == -1.0).all()
    assert ours["rewards"][SUCCESS_CHUNK, 0, (SUCCESS_STEP - 1) % CHUNK] == 5.0
    assert ours["rewards"][SUCCESS_CHUNK + 1, 0, 0] == -1.0 and ours["rewards"][LIMIT_CHUNK + 1, 1, 0] == -1.0
    # new ids were drawn, each env's on the other task (a new scene on both sides)
    final = ours["ids"][-1]
    assert (final // TRIALS != ours["ids0"] // TRIALS).all(), (ours["ids0"], final)
    # difference 5 shows: after each auto-reset RLinf's entry for the other (running) env is the fresh draw
    assert theirs["ids"][SUCCESS_CHUNK, 1] != _running(theirs, SUCCESS_CHUNK)[1]
    assert theirs["ids"][LIMIT_CHUNK, 0] != _running(theirs, LIMIT_CHUNK)[0]


def test_no_auto_reset_dones_and_rewards_equal_rlinf(runs):
    """Without auto-reset (RLinf ``auto_reset: False``), where the loss masks come from per-step dones: env 0 the
    expert episode, its actions keeping the bowl on the plate to the step limit; env 1 random actions to the limit. RLinf reports raw
    per-step terminations (the success persists, so every step from the success on) and keeps stepping the
    finished env with reward 0; vlarl stops the env at the success step, its ``dones`` True from there and its
    rewards 0 (padding). Both agree step by step on rewards and dones, on observations while an episode runs
    (and at the limit), and neither resets. Deliberate difference (6): RLinf also truncates the finished env at
    the step limit, vlarl does not."""
    ours, theirs = runs["off"]
    _assert_first_reset(ours, theirs)
    for k in range(len(ours["rewards"])):
        for e in range(NUM_ENVS):
            where = f"no auto-reset, chunk {k}, env {e}"
            np.testing.assert_array_equal(ours["rewards"][k, e], theirs["rewards"][k, e].astype(np.float32),
                                          err_msg=where)
            rlinf_done = theirs["terminations"][k, e] | theirs["truncations"][k, e]  # raw per step
            np.testing.assert_array_equal(ours["dones"][k, e], rlinf_done, err_msg=where)
            # RLinf's elapsed steps keep counting in the finished env: it truncates every env at the limit,
            # env 0 although its episode ended at the success; vlarl reports no truncation for a finished env
            at_limit = [k == LIMIT_CHUNK and i == CHUNK - 1 for i in range(CHUNK)]
            assert theirs["truncations"][k, e].tolist() == at_limit, where
            assert ours["truncated"][k, e].tolist() == (at_limit if e else [False] * CHUNK), where
            # no reset on either side
            assert ours["ids"][k, e] == theirs["ids"][k, e] == _running(theirs, k)[e] == ours["ids0"][e], where
            if e or k < SUCCESS_CHUNK:  # after the success RLinf's env 0 moves on (vlarl's is stopped)
                _assert_same_obs(ours, theirs, k, e, where)
    success_at = (SUCCESS_STEP - 1) % CHUNK
    assert int(np.argmax(ours["dones"][SUCCESS_CHUNK, 0])) == success_at
    assert ours["rewards"][SUCCESS_CHUNK, 0, success_at] == 5.0
    assert ours["dones"][SUCCESS_CHUNK + 1:, 0].all() and not ours["rewards"][SUCCESS_CHUNK + 1:, 0].any()
    assert ours["episode_done"][:, 0].tolist() == [k == SUCCESS_CHUNK for k in range(len(ours["rewards"]))]
    assert ours[keys.SUCCESS_ONCE][SUCCESS_CHUNK, 0] and ours[keys.EPISODE_LEN][SUCCESS_CHUNK, 0] == SUCCESS_STEP
    assert ours[keys.RETURN][SUCCESS_CHUNK, 0] == theirs["ep_return"][SUCCESS_CHUNK, 0] == 4.0
    assert ours["episode_done"][:, 1].tolist() == [k == LIMIT_CHUNK for k in range(len(ours["rewards"]))]
    assert ours[keys.EPISODE_LEN][LIMIT_CHUNK, 1] == MAX_STEPS and not ours[keys.SUCCESS_ONCE][LIMIT_CHUNK, 1]
