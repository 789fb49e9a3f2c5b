"""rl-train (PPO, then GRPO) with a tiny pi0 on ManiSkill3 PickCube-v1 through the same loop as LIBERO,
with the in-training evaluation on the eval split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlarl_cli.config.loading import load_config
from vlarl_cli.training.rl import train

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.usefixtures("maniskill_ready")]

TINY = ["actor.model.model_path=null", "actor.model.preset=tiny", "env.train.max_episode_steps=10",
        "env.train.max_steps_per_rollout_epoch=10", "env.eval.max_episode_steps=10",
        "env.eval.max_steps_per_rollout_epoch=10", "runner.max_epochs=1", "runner.val_check_interval=1",
        "runner.save_interval=1", "actor.global_batch_size=4"]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_ppo_trains_and_evaluates_on_pickcube(tmp_path: Path) -> None:
    result = train(load_config("maniskill_pickcube_ppo_openpi", [*TINY, f"runner.logger.log_path={tmp_path}"]))
    assert result.iterations == 1
    row = _rows(tmp_path)[0]
    # 2 envs x 10 steps with a 0.01 step penalty and a random policy that never succeeds: return -0.1
    assert row["env/num_trajectories"] == 2 and row["env/episode_len"] == 10 and row["env/success_once"] == 0.0
    assert row["env/return"] == pytest.approx(-0.1)
    assert row["eval/num_trajectories"] == 2 and row["eval/return"] == 0.0  # eval has no step penalty
    assert row["train/critic/value_loss"] > 0 and row["train/actor/grad_norm"] > 0
    assert (tmp_path / "checkpoints" / "global_step_1" / "model.safetensors").is_file()


def test_grpo_groups_share_a_scene_and_equal_returns_give_no_gradient(tmp_path: Path) -> None:
    overrides = [*TINY, "runner.val_check_interval=-1", "algorithm.adv_type=grpo", "algorithm.loss_type=actor",
                 "algorithm.group_size=2", "env.train.group_size=2", "actor.model.add_value_head=false",
                 f"runner.logger.log_path={tmp_path}"]
    assert train(load_config("maniskill_pickcube_ppo_openpi", overrides)).iterations == 1
    row = _rows(tmp_path)[0]
    # both members of the one group fail with the same step-penalty return: GRPO advantages are exactly 0
    assert row["env/return"] == pytest.approx(-0.1) and row["train/actor/policy_loss"] == 0.0


def test_digital_twin_recipe_loads_and_is_refused_when_the_env_is_made(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from vlarl_cli.errors import EnvError

    monkeypatch.setenv("MS_ASSET_DIR", str(tmp_path / "ms"))  # no assets: the error names `vlarl download`
    monkeypatch.delenv("MANISKILL_ASSET_DIR", raising=False)
    loaded = load_config("maniskill_pickcube_ppo_openpi", ["env.train.init_params.id=PutOnPlateInScene25Main-v3",
                                                           *TINY, f"runner.logger.log_path={tmp_path}"])
    assert loaded.config.env.train.init_params.id == "PutOnPlateInScene25Main-v3"
    with pytest.raises(EnvError, match="vlarl download RLinf/maniskill_assets"):
        train(loaded)
