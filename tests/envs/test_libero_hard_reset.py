"""The cheap hard reset (``envs/libero/env.py`` ``_CompiledModel``) against robosuite's own hard reset.

Two simulators of a task, one with the compiled model kept and one rebuilding it as robosuite does, play the
same trials (out of order, so the seed stream is replayed too, each side from the seed) with the same random
actions: every observation (both cameras, states), reward and done must be bit-identical over whole episodes,
and so must the seed streams they leave, which the envs of a process then share. ~30 s quiet:
the reference side pays robosuite's full hard reset (~3 s each) on purpose. The spatial suite's
scene is covered by ``test_libero_standard_protocol.py`` (against openpi's loop with robosuite's resets).
"""

from __future__ import annotations

import numpy as np
import pytest

from vlarl_cli import keys

pytestmark = pytest.mark.libero


def play(env, trials: list[int], steps: int) -> list[list[dict]]:
    """Every observation, reward and done of ``trials`` played with random 4-step chunks (seeded per trial)."""
    episodes = []
    for trial in trials:
        rng = np.random.default_rng(trial)
        seen = [env.reset(trial_id=trial)]
        while env.episode_active:
            result = env.step_chunk(rng.uniform(-1.0, 1.0, size=(4, 7)))
            seen.append({**result.obs, "rewards": result.rewards, "dones": result.dones})
        assert len(seen) == 1 + steps // 4
        episodes.append(seen)
    return episodes


def test_cheap_hard_reset_equals_robosuite_hard_reset(libero_ready, monkeypatch: pytest.MonkeyPatch) -> None:
    from vlarl_cli.envs.libero import env as env_module
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv

    options = EnvOptions(resolution=128, settle_steps=3, max_episode_steps=8)
    # libero_goal's scene has fixtures (stove, cabinet) that resets move through the model's body_pos
    cheap, reference = LiberoEnv("libero_goal", 0, options), LiberoEnv("libero_goal", 0, options)
    try:
        assert cheap.hard_reset and cheap._model_cache is not None and reference._model_cache is not None
        reference._model_cache.uninstall()
        trials = [1, 0]
        monkeypatch.setattr(env_module, "_STREAMS", {})  # each side replays the seed stream on its own
        got = play(cheap, trials, 8)
        cheap_streams = env_module._STREAMS
        monkeypatch.setattr(env_module, "_STREAMS", {})
        want = play(reference, trials, 8)
        # trial 1 first replays one reset, then two more: every one reused the compiled model
        assert cheap._model_cache.reused == 3 and reference._model_cache.reused == 0
        (streams,), (ref_streams,) = cheap_streams.values(), env_module._STREAMS.values()
        assert sorted(streams) == sorted(ref_streams) == [0, 1, 2]
        for k in (1, 2):  # numpy's stream after k resets: MT19937 keys and position
            assert np.array_equal(streams[k][1], ref_streams[k][1]) and streams[k][2:] == ref_streams[k][2:]
        # the stream before trial 2 is known in this process (the reference's resets): no replay
        shared, fresh = cheap.reset(trial_id=2), reference.reset(trial_id=2)
        assert cheap._model_cache.reused == 4
        assert np.array_equal(shared[keys.MAIN_IMAGES], fresh[keys.MAIN_IMAGES])
    finally:
        cheap.close()
        reference.close()
    for trial, ep_got, ep_want in zip(trials, got, want, strict=True):
        for t, (a, b) in enumerate(zip(ep_got, ep_want, strict=True)):
            for k in (keys.MAIN_IMAGES, keys.WRIST_IMAGES, keys.STATES, "joint_pos", "rewards", "dones"):
                if k in b:
                    assert np.array_equal(a[k], b[k]), f"trial {trial} observation {t}: {k} differs"
