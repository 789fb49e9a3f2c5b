"""``render_quality``: exact is MuJoCo's default rendering; fast / fast_noaa change pixels only (never the physics),
survive hard resets (which build a new render context), and are reported as deviations wherever results are."""

from __future__ import annotations

import numpy as np
import pytest

from vlarl_cli import keys
from vlarl_cli.envs.libero.env import RENDER_QUALITIES, EnvOptions
from vlarl_cli.errors import EnvError


def test_unknown_quality_is_refused_with_the_choices() -> None:
    with pytest.raises(EnvError, match=r'Unknown render_quality "fastest".*fast'):
        EnvOptions(render_quality="fastest").validate()


def test_config_deviation_lines_name_the_split() -> None:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.envs import render_deviations

    assert render_deviations(load_config("quickstart").config) == []
    lines = render_deviations(load_config("quickstart", ["env.train.render_quality=fast"]).config)
    assert len(lines) == 1 and lines[0].startswith("env.train.render_quality fast: MuJoCo's reflection pass off")
    with pytest.raises(Exception, match="render_quality"):
        load_config("quickstart", ["env.eval.render_quality=blurry"])


def test_card_records_a_quality_other_than_exact() -> None:
    from vlarl_cli.training.evaluation import EvalSettings, card_conflicts, make_card, plan_episodes

    class Policy:
        num_action_chunks = 5

    plan = plan_episodes("libero_spatial", (0,), 2)
    exact = make_card(EvalSettings(suite="libero_spatial", trials=2), Policy(), None, plan)
    fast = make_card(EvalSettings(suite="libero_spatial", trials=2, render_quality="fast"), Policy(), None, plan)
    assert "render_quality" not in exact  # cards written before the setting existed still match
    assert not any("render_quality" in d for d in exact["deviations"])
    assert fast["render_quality"] == "fast"
    assert any(d.startswith("render_quality fast:") for d in fast["deviations"])
    assert card_conflicts(exact, fast) == ["render_quality"]  # no resume across qualities


def _reset_images(quality: str, *, hard_reset: bool, resets: int = 1) -> list[dict]:
    from vlarl_cli.envs.libero.env import LiberoEnv

    env = LiberoEnv("libero_spatial", 0, EnvOptions(resolution=128, seeding="every_reset", hard_reset=hard_reset,
                                                    settle_steps=1, render_quality=quality))
    try:
        return [env.reset(0) for _ in range(resets)]
    finally:
        env.close()


@pytest.mark.libero
def test_fast_qualities_change_pixels_slightly_and_never_the_state(libero_ready) -> None:
    """Three simulators (50-70 s on a loaded 2-core machine): the two hard resets of fast_noaa caught a real bug
    (a replaced render context kept alive freed the new context's GL objects: 3.4 / 255 off)."""
    exact = _reset_images("exact", hard_reset=False)[0]
    fast = _reset_images("fast", hard_reset=False)
    # two hard resets: the second builds a new render context, which must get the setting again
    noaa = _reset_images("fast_noaa", hard_reset=True, resets=2)
    for obs, (low, high) in ((fast[0], (0.1, 2.0)), (noaa[0], (1.0, 5.0)), (noaa[1], (1.0, 5.0))):
        np.testing.assert_array_equal(obs[keys.STATES], exact[keys.STATES])
        diff = np.abs(obs[keys.MAIN_IMAGES].astype(np.int16) - exact[keys.MAIN_IMAGES]).mean()
        assert low < diff < high, diff  # measured: fast 0.93, fast_noaa 2.8 (of 255)
    np.testing.assert_array_equal(noaa[0][keys.MAIN_IMAGES], noaa[1][keys.MAIN_IMAGES])
    assert set(RENDER_QUALITIES) == {"exact", "fast", "fast_noaa"}
