"""RLinf's ManiSkill recipes (committed unchanged under tests/fixtures/rlinf_maniskill, see its README) load
and dry-run: their env keys and task names are accepted, the keys vlarl does not follow are printed as
deviations, the rest as ignored keys, and the plan shows the model size and the host memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlarl_cli.config.loading import load_config
from vlarl_cli.policies.registry import settings_values

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "rlinf_maniskill"
RECIPES = {  # recipe -> (printed model type, train envs, env ranks of the placement on 8 devices)
    "maniskill_ppo_openvlaoft": ("openvla_oft", 128, 4),
    "maniskill_grpo_openvlaoft": ("openvla_oft", 256, 8),
    "maniskill_ppo_openpi": ("openpi", 320, 8),
    "maniskill_ppo_openpi_pi05": ("openpi", 320, 8),
    "maniskill_ppo_openvlaoft_quickstart": ("openvla_oft", 8, 1),
}
REFUSED = {  # recipe -> the RLinf feature it switches on, which vlarl does not implement
    "maniskill_async_ppo_openpi": ("asynchronous PPO", "algorithm.staleness_threshold"),
    "maniskill_ppo_co_training_openpi_pi05": ("SFT co-training", "actor.enable_sft_co_train"),
}
# training/dry_run.py: a ManiSkill env rank holds its envs in one process, 568 MiB + 6.6 MiB per env (measured)
RANK_MIB, ENV_MIB = 158 + 410, 6.6


@pytest.fixture()
def rlinf_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # what an RLinf checkout's run script exports: the recipes search ${EMBODIED_PATH}/config/
    monkeypatch.setenv("EMBODIED_PATH", str(ROOT))


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_dry_runs_unchanged(name: str, tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "EMBODIED_PATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run_dir = tmp_path / "run"  # the recipes log to ../results
    run_dir.mkdir()
    out = subprocess.run([sys.executable, "-m", "vlarl_cli.cli.main", "rl-train", "--config",
                          str(ROOT / "config" / f"{name}.yaml"), "--dry-run", "--world-size", "8"],
                         capture_output=True, text=True, timeout=300, cwd=run_dir, env=env)
    assert out.returncode == 0, out.stderr
    model_type, envs, env_ranks = RECIPES[name]
    assert "Placement on 8 device(s)" in out.stdout
    assert f"train envs: {envs};" in out.stdout
    assert f"Model {model_type} (full size)" in out.stdout and "B parameters" in out.stdout
    # host RAM of device 0 (an env rank in every recipe): one ManiSkill process holding its share of the envs
    row0 = next(line for line in out.stdout.splitlines() if line.strip("│ ").startswith("0 "))
    assert row0.split("│")[-2].strip() == f"{(RANK_MIB + envs / env_ranks * ENV_MIB) / 1024:.2f}"
    # keys vlarl does not follow are printed with what it does instead; the placeholder path is a warning
    assert "sim_backend" not in out.stderr  # the gpu backend is implemented (envs/maniskill/sims.py GpuBank)
    assert "deviation: env.train.init_params.control_mode = 'None'" in out.stderr
    assert "deviation: env.train.init_params.obs_mode = 'rgb+segmentation'" in out.stderr
    assert "env.train.init_params.obj_set" in out.stderr  # accepted, not used: listed by name
    assert "placeholder of an RLinf recipe" in out.stderr


def test_recipe_values_reach_the_config(rlinf_env: None) -> None:
    ppo = load_config(ROOT / "config" / "maniskill_ppo_openpi.yaml")
    cfg = ppo.config
    assert cfg.env.train.env_type == "maniskill"
    assert cfg.env.train.init_params.id == "PutOnPlateInScene25Main-v3"
    assert cfg.env.train.init_params.control_mode == "pd_ee_delta_pose"  # RLinf's "None", printed as a deviation
    assert (cfg.env.train.max_episode_steps, cfg.env.train.total_num_envs) == (80, 320)
    assert cfg.env.eval.ignore_terminations and cfg.env.eval.is_eval
    assert cfg.actor.model.effective_noise_method == "flow_noise"
    # openpi.action_horizon 8 (RLinf's pi0_maniskill) reaches the pi0 family; num_action_chunks 5 executed
    assert settings_values(cfg.actor.model)["action_horizon"] == 8
    assert cfg.actor.model.num_action_chunks == 5
    # use_dsrl: False in RLinf's model/pi0.yaml: its dsrl_* sizes are ignored, not refused
    assert "actor.model.openpi.dsrl_state_dim" in ppo.ignored
    assert any(d.startswith("algorithm.bootstrap_type = 'always'") for d in ppo.deviations)
    assert any(d.startswith("actor.model.openpi.num_images_in_input = 1") for d in ppo.deviations)
    assert not any(d in ppo.ignored for d in ("env.train.init_params.sim_backend", "algorithm.bootstrap_type"))
    grpo = load_config(ROOT / "config" / "maniskill_grpo_openvlaoft.yaml", world_size=8).config
    assert (grpo.algorithm.adv_type, grpo.algorithm.group_size, grpo.env.train.group_size) == ("grpo", 8, 8)
    assert grpo.env.eval.init_params.id == "PutOnPlateInScene25Main-v3"  # env/maniskill_ood_template


@pytest.mark.parametrize("fragment", ["maniskill_put_on_plate_in_scene_25_main", "maniskill_ood_template",
                                      "maniskill_pick_cube", "maniskill_pick_and_place_digital_twin",
                                      "manikill_put_carrot_on_plate_in_scene"])
def test_every_env_fragment_loads(fragment: str, tmp_path: Path, rlinf_env: None) -> None:
    recipe = tmp_path / "config" / "recipe.yaml"
    recipe.parent.mkdir()
    recipe.write_text(f"defaults:\n  - env/{fragment}@env.train\n  - model/pi0@actor.model\n"
                      "runner:\n  logger:\n    log_path: runs\n"
                      "env:\n  train: {total_num_envs: 2, max_episode_steps: 10, max_steps_per_rollout_epoch: 10}\n"
                      "actor:\n  micro_batch_size: 2\n  global_batch_size: 4\n"
                      "  model:\n    preset: tiny\n    model_path: null\n    add_value_head: true\n"
                      "    num_action_chunks: 5\n")
    (tmp_path / "config" / "env").symlink_to(ROOT / "config" / "env")
    loaded = load_config(recipe)
    split = loaded.config.env.train
    source = (ROOT / "config" / "env" / f"{fragment}.yaml").read_text()
    assert split.env_type == "maniskill" and split.init_params.id in source
    assert split.init_params.sim_backend == "gpu"  # RLinf's batched backend, kept as written


def test_a_dsrl_size_with_dsrl_switched_on_is_refused(rlinf_env: None) -> None:
    from vlarl_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="DSRL"):
        load_config(ROOT / "config" / "maniskill_ppo_openpi.yaml", ["actor.model.openpi.use_dsrl=true"])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_recipes_of_features_vlarl_lacks_are_refused_by_name(name: str, rlinf_env: None) -> None:
    from vlarl_cli.errors import ConfigError

    feature, key = REFUSED[name]
    with pytest.raises(ConfigError) as info:
        load_config(ROOT / "config" / f"{name}.yaml", world_size=8)
    assert "does not implement" in info.value.problem and feature in info.value.problem
    assert key in info.value.problem and "Did you mean" not in info.value.problem
