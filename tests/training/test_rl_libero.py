"""The rl-train loop on the real LIBERO simulator with a tiny pi0: end to end, checkpoint, exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vlarl_cli.config.loading import load_config
from vlarl_cli.training import checkpoint as ckpt
from vlarl_cli.training.rl import draw_reset_ids, train

pytestmark = pytest.mark.libero

SMALL = [
    "env.train.total_num_envs=1", "env.train.num_workers=1", "env.train.max_episode_steps=10",
    "env.train.max_steps_per_rollout_epoch=10", "env.train.settle_steps=2",
    "env.train.video_cfg.save_video=false", "actor.micro_batch_size=1", "actor.global_batch_size=2",
    "runner.save_interval=1", "algorithm.update_epoch=1",
]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_then_resume_reproduces_the_uninterrupted_run(tmp_path: Path) -> None:
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    full = train(load_config("libero_tiny_ppo", [*SMALL, "runner.max_epochs=2", f"runner.logger.log_path={full_dir}"]))
    assert full.iterations == 2
    rows = _metrics(full_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("train/actor/policy_loss", "train/critic/value_loss", "train/actor/approx_kl", "train/actor/clip_fraction", "train/actor/grad_norm",
                "env/success_once", "env/episode_len", "rollout/advantages_mean", "rollout/returns_mean",
                "time/env/env_interact_step", "time/rollout/predict", "time/actor_training"):
        assert key in rows[0], key
    # the step penalty of the quickstart makes every loss term non-zero; the random policy never succeeds
    assert rows[0]["env/success_once"] == 0.0 and rows[0]["env/episode_len"] == 10
    assert rows[0]["rollout/returns_mean"] < 0 and rows[0]["train/critic/value_loss"] > 0 and rows[0]["train/actor/grad_norm"] > 0
    assert rows[0]["train/actor/clip_fraction"] <= 1.0
    # checkpoints are complete and `latest` points at the last one
    last = ckpt.resolve_checkpoint(full_dir, "auto")
    assert last.name == "global_step_2"
    for name in ("model.safetensors", "vlarl_config.json", "optimizer.pt", "rng.pt", "trainer_state.json", "config.yaml"):
        assert (last / name).is_file()
    assert json.loads((last / "trainer_state.json").read_text())["iteration"] == 2

    # "kill" after iteration 1, then resume: iteration 2 must equal the uninterrupted run's
    train(load_config("libero_tiny_ppo", [*SMALL, "runner.max_epochs=1", f"runner.logger.log_path={cut_dir}"]))
    resumed = train(load_config("libero_tiny_ppo", [*SMALL, "runner.max_epochs=2", f"runner.logger.log_path={cut_dir}"]),
                    resume="auto")
    assert resumed.iterations == 2
    cut_rows = _metrics(cut_dir)
    assert [r["step"] for r in cut_rows] == [1, 2]
    for key, value in rows[1].items():
        if key.startswith(("train/", "rollout/", "env/")):
            assert cut_rows[1][key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    from safetensors.torch import load_file

    a = load_file(str(ckpt.checkpoint_dir(full_dir, 2) / "model.safetensors"))
    b = load_file(str(ckpt.checkpoint_dir(cut_dir, 2) / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all((a[k] == b[k]).all() for k in a)


def test_reset_ids_are_a_pure_function_of_the_iteration() -> None:
    pool = np.arange(100, 150)
    a = draw_reset_ids(pool, 8, 4, ordered=False, seed=3, rank=0, world_size=1, epoch_index=5)
    b = draw_reset_ids(pool, 8, 4, ordered=False, seed=3, rank=0, world_size=1, epoch_index=5)
    assert (a == b).all() and (a[:4] == a[0]).all() and (a[4:] == a[4]).all()
    ordered = [draw_reset_ids(pool, 4, 2, ordered=True, seed=0, rank=r, world_size=2, epoch_index=e)
               for e in range(2) for r in range(2)]
    # ranks take consecutive slices, epochs continue where the last one stopped
    assert [list(x) for x in ordered] == [[100, 100, 101, 101], [102, 102, 103, 103],
                                          [104, 104, 105, 105], [106, 106, 107, 107]]


TINY_RUN = ["actor.model.model_path=null", "actor.model.preset=tiny", "env.train.total_num_envs=2",
            "env.train.num_workers=1", "env.train.rollout_epoch=1", "env.train.max_episode_steps=10",
            "env.train.max_steps_per_rollout_epoch=10", "env.train.settle_steps=2", "env.train.task_ids=[0]",
            "env.train.video_cfg.save_video=false", "env.train.init_params.camera_heights=128",
            "env.train.init_params.camera_widths=128", "runner.max_epochs=1", "runner.logger.logger_backends=[]",
            "actor.global_batch_size=2", "actor.micro_batch_size=1", "algorithm.update_epoch=1"]


@pytest.mark.parametrize(("recipe", "extra"), [
    ("libero_spatial_ppo_gr00t", []),
    ("libero_spatial_ppo_gr00t_n1d6", ["actor.model.num_action_chunks=5"]),
    ("libero_10_grpo_openvlaoft", ["algorithm.group_size=2", "algorithm.filter_rewards=false",
                                   "env.train.max_episode_steps=16", "env.train.max_steps_per_rollout_epoch=16"]),
])
def test_seed_recipe_runs_with_its_tiny_model(recipe: str, extra: list[str], tmp_path: Path) -> None:
    """The published recipes train for an iteration on real LIBERO with the family's tiny preset."""
    config = load_config(recipe, [*TINY_RUN, *extra, f"runner.logger.log_path={tmp_path}"])
    result = train(config)
    assert result.iterations == 1
    metrics = result.last_metrics
    assert metrics["env/episode_len"] == config.config.env.train.max_episode_steps
    assert metrics["train/actor/skipped_steps"] == 0
    assert abs(metrics["train/actor/ratio"] - 1.0) < 0.5  # one mini-batch step from the sampling weights
    assert (result.checkpoint / "vlarl_config.json").is_file()  # a family policy folder (vlarl eval/convert)
