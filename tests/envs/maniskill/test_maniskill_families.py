"""Every family on ManiSkill3 PickCube-v1 through the CLI: `vlarl rl-train` (PPO, then GRPO) with the tiny
OpenVLA-OFT / GR00T N1.5 / GR00T N1.6 presets, then `vlarl eval --task PickCube-v1` on the PPO checkpoint
(success rate with its Wilson interval, one video). The pi0 family is covered by test_maniskill_rl.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.usefixtures("maniskill_ready")]

SHORT = ["runner.max_epochs=1", "runner.save_interval=1", "runner.val_check_interval=-1"]
GRPO = ["algorithm.adv_type=grpo", "algorithm.loss_type=actor", "algorithm.group_size=2", "env.train.group_size=2",
        "actor.model.add_value_head=false"]
#: preset -> (GRPO preset or None: the PPO preset with GRPO overrides, env steps, the gripper convention)
FAMILIES = {
    "maniskill_pickcube_ppo_openvlaoft": ("maniskill_pickcube_grpo_openvlaoft", 16, "libero"),
    "maniskill_pickcube_ppo_gr00t": (None, 10, "maniskill"),
    "maniskill_pickcube_ppo_gr00t_n1d6": (None, 10, "maniskill"),
}


def _cli(args: list[str]) -> None:
    from vlarl_cli.cli.main import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"


def _rl_train(preset: str, steps: int, run_dir: Path, extra: list[str]) -> dict:
    _cli(["rl-train", "--config", preset, *SHORT, f"env.train.max_episode_steps={steps}",
          f"env.train.max_steps_per_rollout_epoch={steps}", f"runner.logger.log_path={run_dir}", *extra])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("preset", list(FAMILIES))
def test_family_trains_with_ppo_and_grpo_and_evaluates(preset: str, tmp_path: Path) -> None:
    grpo_preset, steps, gripper = FAMILIES[preset]
    row = _rl_train(preset, steps, tmp_path / "ppo", [])
    # 2 envs x `steps` steps, a random tiny policy that never succeeds, 0.01 step penalty
    assert row["env/num_trajectories"] == 2 and row["env/episode_len"] == steps and row["env/success_once"] == 0.0
    assert row["env/return"] == pytest.approx(-0.01 * steps)
    assert row["train/critic/value_loss"] > 0 and row["train/actor/grad_norm"] > 0

    row = _rl_train(grpo_preset or preset, steps, tmp_path / "grpo", [] if grpo_preset else GRPO)
    # the one group of 2 envs starts from one scene and both fail with the same return: GRPO advantages are 0
    assert row["env/return"] == pytest.approx(-0.01 * steps) and row["train/actor/policy_loss"] == 0.0

    out = tmp_path / "eval"
    _cli(["eval", "--task", "PickCube-v1", "--checkpoint", str(tmp_path / "ppo" / "checkpoints" / "global_step_1"),
          "--episodes", "2", "--max-steps", "5", "--live-video", "1", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["successes"] == 0 and summary["mean_episode_len"] == 5.0
    # Wilson 95% for 0/2: centre = half = (z^2 / 4) / (1 + z^2 / 2) = 0.9604 / 2.9208
    assert summary["wilson95"] == pytest.approx([0.0, 2 * 0.9604 / 2.9208], abs=1e-4)
    assert summary["protocol"]["gripper"] == gripper and [e["seed"] for e in summary["per_episode"]] == [0, 1]
    assert len(list((out / "videos").glob("*.mp4"))) == 1


def test_state_learning_preset_trains_an_mlp_on_dense_rewards(tmp_path: Path) -> None:
    """maniskill_pushcube_ppo_mlp: the toy Gaussian MLP on 35-d PushCube-v1 states, ManiSkill's normalized
    dense reward (in [0, 1] per step), with the in-training evaluation (benchmarks/maniskill_learning.py
    runs it long enough to learn)."""
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.rl import train

    overrides = ["runner.max_epochs=1", "runner.val_check_interval=1", "runner.save_interval=1",
                 "env.train.total_num_envs=2", "env.eval.total_num_envs=2", "env.train.max_episode_steps=5",
                 "env.train.max_steps_per_rollout_epoch=5", "env.eval.max_episode_steps=5",
                 "env.eval.max_steps_per_rollout_epoch=5", "actor.global_batch_size=10", "actor.micro_batch_size=10",
                 f"runner.logger.log_path={tmp_path}"]
    result = train(load_config("maniskill_pushcube_ppo_mlp", overrides))
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert result.iterations == 1 and row["env/num_trajectories"] == 2 and row["env/episode_len"] == 5
    # the dense reward is a level in (0, 1] at every step (reaching term > 0 while the cube is not placed)
    assert 0.0 < row["env/return"] <= 5.0 and 0.0 < row["eval/return"] <= 5.0
    assert row["train/critic/value_loss"] > 0 and row["train/actor/grad_norm"] > 0
