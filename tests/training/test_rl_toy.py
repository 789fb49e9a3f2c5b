"""rl-train learns: the same loop as LIBERO (collect -> GAE -> PPO -> checkpoint) on the toy reach task."""

from __future__ import annotations

import json
from pathlib import Path

from vlarl_cli.config.loading import load_config
from vlarl_cli.training.rl import train


def test_ppo_flow_sde_learns_to_reach(tmp_path: Path) -> None:
    result = train(load_config("toy_reach_ppo", [f"runner.logger.log_path={tmp_path}"]))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 31))
    first = rows[0]["env/success_once"]
    assert first <= 0.3  # a random flow policy rarely reaches the goal
    evals = [r["eval/success_once"] for r in rows if "eval/success_once" in r]
    assert len(evals) == 3  # iterations 10, 20, 30
    assert evals[-1] >= 0.6 and evals[-1] >= first + 0.3, (first, evals)
    late = sum(r["env/success_once"] for r in rows[-5:]) / 5
    assert late >= first + 0.25, (first, late)
    assert result.checkpoint is not None and (result.checkpoint / "model.safetensors").is_file()


def test_one_iteration_step_by_step(tmp_path: Path) -> None:
    """Each step of the loop is a Trainer method that can be called (and checked) on its own."""
    from vlarl_cli.distributed import dist
    from vlarl_cli.distributed.placement import Cluster
    from vlarl_cli.training.rl import Trainer

    config = load_config("toy_reach_ppo", [f"runner.logger.log_path={tmp_path}", "runner.max_epochs=1",
                                           "env.train.total_num_envs=8", "actor.global_batch_size=16",
                                           "actor.micro_batch_size=8", "runner.val_check_interval=1"]).config
    cluster = Cluster.create(dist.init_distributed(), config.cluster.placement(1), num_envs=8, group_size=1,
                             shard_actor=True)
    assert cluster.collocated and cluster.is_actor_source and not cluster.owns_rollout_copy
    run = Trainer(config, cluster)
    run.resume(None)
    run.open_logs()
    run.open_envs()
    try:
        assert run.running()
        metrics = run.start_iteration()
        run.sync(metrics)
        assert metrics == {}  # collocated: the rollout samples with the actor module, nothing to send
        rollouts = run.collect(metrics)
        assert rollouts is not None and len(rollouts) == config.rollout_epoch
        t, c = config.chunk_steps_per_epoch, config.actor.model.num_action_chunks
        assert rollouts[0].rewards.shape == (t, 8, c) and rollouts[0].values.shape == (t + 1, 8)
        assert metrics["env/num_trajectories"] == 8  # every toy episode ends within the rollout epoch
        assert run.hand_to_actors(rollouts, metrics) is rollouts
        run.update(rollouts, metrics)
        assert run.state.iteration == 1 and run.state.optimizer_steps == run.steps_per_iteration
        # 4 update epochs x 2 mini-batches (8 envs x 4 chunk steps = 32 samples, 16 per mini-batch)
        assert metrics["train/actor/optimizer_steps"] == run.steps_per_iteration == 8
        run.evaluate(metrics)
        assert 0.0 <= metrics["eval/success_once"] <= 1.0
        run.log(metrics)
        run.checkpoint()
        assert not run.running()
    finally:
        run.close()
    assert run.result().checkpoint == tmp_path / "checkpoints" / "global_step_1"


def test_env_metrics_by_hand() -> None:
    """RLinf's env/reward is the mean over episodes of return / length; ours besides: the mean step reward."""
    import torch

    from vlarl_cli.training.batch import rollout_metrics
    from vlarl_cli.training.rollout import Rollout

    rewards = torch.zeros(2, 2, 2)
    rewards[1, 0, 1] = 1.0  # env 0 succeeds at its 4th step; env 1 runs out of time after 4 steps
    success = rewards.bool()
    r = Rollout(replay={}, logprobs=torch.zeros(2, 2, 2, 1), values=torch.zeros(3, 2), rewards=rewards,
                dones=torch.zeros(3, 2, 2, dtype=torch.bool), truncated=torch.zeros(2, 2, 2, dtype=torch.bool),
                final_values=torch.zeros(2, 2), success=success,
                episodes={"success_once": [1.0, 0.0], "success_at_end": [1.0, 0.0], "return": [1.0, 0.0],
                          "episode_len": [4.0, 4.0]})
    m = rollout_metrics([r])
    assert m["env/num_trajectories"] == 2 and m["env/success_once"] == 0.5 and m["env/episode_len"] == 4.0
    assert m["env/reward"] == (1.0 / 4 + 0.0 / 4) / 2
    assert m["env/mean_step_reward"] == 1.0 / 8 and m["env/success_any_step"] == 0.5


def test_ppo_gae_at_action_level_learns_to_reach(tmp_path: Path) -> None:
    """reward_type action_level + GAE with one value per executed action (RLinf's OpenVLA-OFT setting):
    values [T+1, N, C] through the rollout, [N, C] returns and value loss, and the toy still learns."""
    import torch

    from vlarl_cli.training.batch import build_batch
    from vlarl_cli.training.rollout import collect

    overrides = [f"runner.logger.log_path={tmp_path}", "algorithm.reward_type=action_level",
                 "actor.model.value_type=action_level"]
    loaded = load_config("toy_reach_ppo", overrides)
    config = loaded.config
    from vlarl_cli.envs.toy import ToyVectorEnv
    from vlarl_cli.policies.registry import build_policy

    policy = build_policy(config.actor.model)
    t, c = config.chunk_steps_per_epoch, config.actor.model.num_action_chunks
    rollout = collect(policy, ToyVectorEnv(8, chunk=c, max_steps=config.env.train.max_steps_per_rollout_epoch), t)
    assert rollout.values.shape == (t + 1, 8, c)
    batch, metrics = build_batch(config, [rollout], critic=True)
    assert batch.returns is not None and batch.old_values is not None
    assert batch.returns.shape == batch.old_values.shape == batch.advantages.shape == (t * 8, c)
    assert torch.isfinite(torch.tensor(metrics["rollout/returns_mean"]))

    train(loaded)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    first = rows[0]["env/success_once"]
    evals = [r["eval/success_once"] for r in rows if "eval/success_once" in r]
    # measured: success_once 0.20 -> 0.91 over 30 iterations, eval 0.39 / 0.53 / 0.86 (chunk level: 0.47 / 0.80 / 0.88)
    assert evals[-1] >= 0.6 and evals[-1] >= first + 0.3, (first, evals)
    assert all("train/critic/value_loss" in r for r in rows)


def test_action_level_rewards_with_chunk_values_are_refused(tmp_path: Path) -> None:
    """A policy with one value per chunk cannot run GAE at action level: refused at load time and, should
    a checkpoint disagree with the config, when the batch is built."""
    import pytest
    import torch

    from vlarl_cli.errors import ConfigError
    from vlarl_cli.training.batch import build_batch
    from vlarl_cli.training.rollout import Rollout

    with pytest.raises(ConfigError, match="value_type: action_level"):
        load_config("toy_reach_ppo", ["algorithm.reward_type=action_level"])
    config = load_config("toy_reach_ppo", ["algorithm.reward_type=action_level",
                                           "actor.model.value_type=action_level"]).config
    t, n, c = 2, 2, 4
    r = Rollout(replay={}, logprobs=torch.zeros(t, n, c, 2), values=torch.zeros(t + 1, n), rewards=torch.zeros(t, n, c),
                dones=torch.zeros(t + 1, n, c, dtype=torch.bool), truncated=torch.zeros(t, n, c, dtype=torch.bool),
                final_values=torch.zeros(t, n), success=torch.zeros(t, n, c, dtype=torch.bool))
    with pytest.raises(ConfigError, match="value_type: action_level"):
        build_batch(config, [r], critic=True)
    chunk = load_config("toy_reach_ppo", ["actor.model.value_type=action_level"]).config
    r.values = torch.zeros(t + 1, n, c)
    with pytest.raises(ConfigError, match="reward_type: action_level"):
        build_batch(chunk, [r], critic=True)


def test_val_before_train_evaluates_the_start_and_prints_before_and_after(tmp_path: Path, capsys) -> None:
    """``runner.val_before_train``: eval/* of the starting weights at step 0 (the same numbers a run with no
    training would log), then one line comparing them with the last evaluation."""
    common = [f"runner.logger.log_path={tmp_path / 'a'}", "runner.val_before_train=True", "runner.max_epochs=2",
              "runner.val_check_interval=2", "env.train.total_num_envs=8", "actor.global_batch_size=16",
              "actor.micro_batch_size=8"]
    train(load_config("toy_reach_ppo", common))
    rows = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and set(rows[0]) >= {"eval/success_once", "eval/return"}
    assert "env/success_once" not in rows[0]  # step 0 is the evaluation only
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("eval success before training"))
    assert line == (f"eval success before training {rows[0]['eval/success_once']:.2f} -> after 2 iterations "
                    f"{rows[2]['eval/success_once']:.2f}")
    # the step-0 evaluation does not change the training that follows: a run without it collects the same
    # rollouts and ends with the same evaluation
    plain = [f"runner.logger.log_path={tmp_path / 'b'}", *common[2:]]
    train(load_config("toy_reach_ppo", plain))
    again = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert again[0]["env/success_once"] == rows[1]["env/success_once"]
    assert again[1]["eval/success_once"] == rows[2]["eval/success_once"]


def test_before_after_line_names_the_iteration_of_the_last_evaluation(tmp_path: Path, capsys) -> None:
    """When the last iteration does not evaluate, the line compares with the latest evaluation and says so."""
    train(load_config("toy_reach_ppo", [f"runner.logger.log_path={tmp_path}", "runner.val_before_train=True",
                                        "runner.max_epochs=3", "runner.val_check_interval=2",
                                        "env.train.total_num_envs=8", "actor.global_batch_size=16",
                                        "actor.micro_batch_size=8"]))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and "eval/success_once" not in rows[3]
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("eval success before training"))
    assert line == (f"eval success before training {rows[0]['eval/success_once']:.2f} -> after 2 iterations "
                    f"{rows[2]['eval/success_once']:.2f} (the last 1 iteration(s) were not evaluated)")


def test_before_line_says_when_no_evaluation_followed(tmp_path: Path, capsys) -> None:
    """val_before_train without periodic evaluation: the line gives the starting rate and says how to get more."""
    train(load_config("toy_reach_ppo", [f"runner.logger.log_path={tmp_path}", "runner.val_before_train=True",
                                        "runner.max_epochs=1", "runner.val_check_interval=-1",
                                        "env.train.total_num_envs=8", "actor.global_batch_size=16",
                                        "actor.micro_batch_size=8"]))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("eval success before training"))
    assert line == (f"eval success before training {rows[0]['eval/success_once']:.2f}; no evaluation after it (set "
                    "runner.val_check_interval to a divisor of runner.max_epochs to evaluate the last weights)")
