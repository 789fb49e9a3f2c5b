"""Config loading: presets, RLinf-style recipes, overrides, and the errors users meet."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from vlarl_cli.config.loading import list_presets, load_config, to_yaml
from vlarl_cli.config.schema import ClusterConfig, VlarlConfig, parse_device_set
from vlarl_cli.errors import ConfigError

SEED_PRESETS = [
    "libero_spatial_ppo_gr00t", "libero_object_ppo_gr00t", "libero_goal_ppo_gr00t", "libero_10_ppo_gr00t",
    "libero_spatial_ppo_gr00t_n1d6", "libero_10_ppo_openpi", "libero_10_grpo_openpi",
    "libero_10_ppo_openpi_pi05", "libero_10_grpo_openpi_pi05", "libero_10_ppo_openvlaoft",
    "libero_10_grpo_openvlaoft", "libero_10_grpo_openvlaoft_simplevla", "quickstart", "libero_tiny_ppo", "toy_reach_ppo", "sft_quickstart", "sft_toy_reach", "sft_learning_run",
    "maniskill_pickcube_ppo_openpi", "maniskill_pickcube_ppo_openvlaoft", "maniskill_pickcube_grpo_openvlaoft",
    "maniskill_pickcube_ppo_gr00t", "maniskill_pickcube_ppo_gr00t_n1d6", "maniskill_pushcube_ppo_mlp",
]


def test_every_seed_recipe_has_a_preset() -> None:
    assert sorted(SEED_PRESETS) == list_presets()


@pytest.mark.parametrize("name", SEED_PRESETS)
def test_preset_loads_and_resolved_dump_reloads_identically(name: str, tmp_path: Path) -> None:
    loaded = load_config(name)
    text = to_yaml(loaded.config)
    assert "${" not in text  # fully resolved
    dumped = tmp_path / "resolved.yaml"
    dumped.write_text(text)
    again = load_config(dumped)
    assert again.config == loaded.config
    assert again.ignored == []  # the resolved config holds only keys vlarl uses


def test_preset_values_follow_the_seed_documents() -> None:
    gr00t = load_config("libero_spatial_ppo_gr00t").config
    assert gr00t.actor.model.model_type == "gr00t"
    assert gr00t.actor.model.num_action_chunks == 5
    assert gr00t.actor.model.effective_denoising_steps == 4
    assert gr00t.actor.model.effective_noise_method == "flow_sde"
    assert gr00t.actor.model.effective_noise_level == 0.5
    assert gr00t.actor.model.disable_dropout
    assert (gr00t.algorithm.gamma, gr00t.algorithm.gae_lambda) == (0.99, 0.95)
    assert (gr00t.actor.optim.lr, gr00t.actor.optim.value_lr) == (5e-6, 1e-4)
    assert gr00t.env.train.task_suite_name == "libero_spatial"
    assert gr00t.env.eval.video_cfg.video_base_dir == "runs/libero_spatial_ppo_gr00t/video/eval"
    n1d6 = load_config("libero_spatial_ppo_gr00t_n1d6").config
    assert n1d6.actor.model.num_action_chunks == 16
    assert n1d6.actor.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap == [
        "Qwen3DecoderLayer", "Siglip2EncoderLayer"]
    oft = load_config("libero_10_grpo_openvlaoft").config
    assert (oft.algorithm.adv_type, oft.algorithm.group_size, oft.train_group_size) == ("grpo", 8, 8)
    assert (oft.algorithm.clip_ratio_low, oft.algorithm.clip_ratio_high) == (0.2, 0.28)
    assert oft.rollout.sampling_params.temperature_train == 1.6
    assert oft.env.train.reward_coef == 5.0 and oft.algorithm.filter_rewards
    pi05 = load_config("libero_10_ppo_openpi_pi05").config
    assert pi05.actor.model.is_pi05 and pi05.actor.model.openpi is not None
    assert pi05.actor.model.openpi.value_after_vlm is True
    assert pi05.actor.model.effective_denoising_steps == 5


RLINF_STYLE_RECIPE = """
defaults:
  - env/libero_goal@env.train
  - env/libero_goal@env.eval
  - model/pi0@actor.model
  - hybrid_engines/fsdp@actor.fsdp_config
  - weight_syncer/patch_syncer@weight_syncer
  - override hydra/job_logging: stdout
hydra:
  run:
    dir: .
  output_subdir: null
  searchpath:
    - file://${oc.env:EMBODIED_PATH}/config/
cluster:
  num_nodes: 1
  component_placement:
    actor,env,rollout: all
runner:
  task_type: embodied
  logger:
    log_path: "${oc.env:VLARL_TEST_LOGS}/results"
    project_name: rlinf
    experiment_name: "goal_ppo"
    logger_backends: ["tensorboard"]
  max_epochs: 10
  save_interval: 5
algorithm:
  adv_type: gae
  loss_type: actor_critic
  update_epoch: 2
  reward_coef: 2.0
env:
  group_name: "EnvGroup"
  train:
    total_num_envs: 8
    max_steps_per_rollout_epoch: 320
    reward_coef: ${algorithm.reward_coef}
  eval:
    total_num_envs: 8
    video_cfg:
      save_video: True
      video_base_dir: ${runner.logger.log_path}/video/eval
rollout:
  group_name: "RolloutGroup"
  generation_backend: "huggingface"
  pipeline_stage_num: 2
  model:
    model_path: "/path/to/model"
    precision: ${actor.model.precision}
actor:
  group_name: "ActorGroup"
  training_backend: "fsdp"
  micro_batch_size: 16
  global_batch_size: 64
  model:
    model_path: "/path/to/model"
    add_value_head: True
    openpi:
      noise_method: "reinflow"
      noise_level: 0.3
reward:
  use_reward_model: False
critic:
  use_critic_model: False
"""


@pytest.fixture()
def rlinf_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VLARL_TEST_LOGS", str(tmp_path / "logs"))
    monkeypatch.delenv("EMBODIED_PATH", raising=False)
    path = tmp_path / "examples" / "embodiment" / "config" / "goal_ppo_openpi.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(RLINF_STYLE_RECIPE)
    return path


def test_rlinf_recipe_composes_with_package_targets_and_interpolation(rlinf_recipe: Path, tmp_path: Path) -> None:
    loaded = load_config(rlinf_recipe)
    cfg = loaded.config
    # env/libero_goal@env.train put the fragment under env.train, the recipe's keys override it
    assert cfg.env.train.task_suite_name == "libero_goal"
    assert cfg.env.train.max_steps_per_rollout_epoch == 320
    assert cfg.env.train.reward_coef == 2.0  # ${algorithm.reward_coef}
    assert cfg.runner.logger.log_path == f"{tmp_path}/logs/results"  # ${oc.env:...}
    assert cfg.env.eval.video_cfg.video_base_dir == f"{tmp_path}/logs/results/video/eval"
    # openpi block wins over the flat field, "reinflow" is RLinf's name for flow_noise
    assert cfg.actor.model.effective_noise_method == "flow_noise"
    assert cfg.actor.model.effective_noise_level == 0.3
    assert cfg.rollout.pipeline_stage_num == 2
    # keys of RLinf's that vlarl does not use are reported by name, once
    assert "rollout.generation_backend" in loaded.ignored
    assert "reward" in loaded.ignored and "weight_syncer" in loaded.ignored
    assert len(loaded.ignored) == len(set(loaded.ignored))


def test_command_line_overrides(rlinf_recipe: Path) -> None:
    cfg = load_config(rlinf_recipe, ["actor.optim.lr=3e-5", "env.train.task_ids=[1,2]",
                                     "actor.model.preset=tiny", "algorithm.reward_coef=4"]).config
    assert cfg.actor.optim.lr == 3e-5
    assert cfg.env.train.task_ids == [1, 2]
    assert cfg.actor.model.preset == "tiny"
    assert cfg.env.train.reward_coef == 4.0  # interpolation resolved after the override


def test_placement_override_replaces_the_files_placement() -> None:
    loaded = load_config("libero_tiny_ppo", ['cluster.component_placement={env: 0, rollout: 1, actor: 0-1}'],
                         world_size=2)
    assert loaded.config.cluster.placement(2) == {"env": [0], "rollout": [1], "actor": [0, 1]}


def _error(tmp_path: Path, body: str, overrides: tuple[str, ...] = ()) -> str:
    path = tmp_path / "broken.yaml"
    path.write_text(textwrap.dedent(body))
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


def test_misspelled_key_suggests_the_right_one(tmp_path: Path) -> None:
    msg = _error(tmp_path, """
        actor:
          optim:
            lerning_rate: 1e-4
            lr: 1e-4
          model: {preset: tiny}
        """)
    assert '"actor.optim.lerning_rate"' in msg
    msg = _error(tmp_path, "algorithm:\n  gama: 0.9\nactor:\n  model: {preset: tiny}\n")
    assert 'Did you mean "gamma"' in msg


def test_misspelled_override_is_caught(tmp_path: Path) -> None:
    msg = _error(tmp_path, "actor:\n  model: {preset: tiny}\n", ("algorithm.gae_lamda=0.9",))
    assert 'Did you mean "gae_lambda"' in msg


def test_wrong_type_names_the_path_and_value(tmp_path: Path) -> None:
    msg = _error(tmp_path, "actor:\n  micro_batch_size: many\n  model: {preset: tiny}\n")
    assert "actor.micro_batch_size" in msg and "'many'" in msg


def test_impossible_batch_sizes_state_the_rule(tmp_path: Path) -> None:
    msg = _error(tmp_path, """
        actor:
          micro_batch_size: 24
          global_batch_size: 64
          model: {preset: tiny}
        """)
    assert "divisible by micro_batch_size x data-parallel size" in msg and "64 vs 24 x 1" in msg
    msg = _error(tmp_path, """
        env:
          train: {total_num_envs: 3, max_steps_per_rollout_epoch: 50}
        actor:
          micro_batch_size: 4
          global_batch_size: 8
          model: {preset: tiny, num_action_chunks: 5}
        """)
    assert "3 x 10 x 1 = 30 samples" in msg


def test_batch_rule_uses_the_actor_world_size() -> None:
    # 2 processes: global 16 = micro 8 x dp 2 is fine; micro 16 x dp 2 = 32 does not divide 16
    env = {"train": {"total_num_envs": 2, "max_steps_per_rollout_epoch": 40}}
    base = {"env": env, "actor": {"micro_batch_size": 8, "global_batch_size": 16, "model": {"preset": "tiny"}}}
    VlarlConfig.model_validate(base, context={"world_size": 2})
    bad = {"env": env, "actor": {"micro_batch_size": 16, "global_batch_size": 16, "model": {"preset": "tiny"}}}
    VlarlConfig.model_validate(bad, context={"world_size": 1})
    with pytest.raises(ValueError, match="16 vs 16 x 2"):
        VlarlConfig.model_validate(bad, context={"world_size": 2})


def test_grpo_needs_a_group(tmp_path: Path) -> None:
    msg = _error(tmp_path, """
        algorithm: {adv_type: grpo, loss_type: actor, group_size: 1}
        actor:
          model: {preset: tiny, add_value_head: false}
        """)
    assert "group_size > 1" in msg and "group_size=1" in msg


def test_unknown_model_type_lists_the_known(tmp_path: Path) -> None:
    msg = _error(tmp_path, "actor:\n  model: {model_type: pi_zero, preset: tiny}\n")
    assert 'model_type "pi_zero" is not a policy vlarl supports' in msg and "gr00t_n1d6" in msg


def test_missing_file_and_unknown_preset() -> None:
    with pytest.raises(ConfigError, match='Did you mean "quickstart"'):
        load_config("quickstrat")
    with pytest.raises(ConfigError, match="neither a file nor a preset"):
        load_config("/no/such/file.yaml")


def test_bad_yaml_and_bad_interpolation(tmp_path: Path) -> None:
    msg = _error(tmp_path, "actor: [unclosed\n")
    assert "YAML syntax error at line 2" in msg and "defaults" not in msg
    assert "Cannot resolve" in _error(tmp_path, "runner:\n  logger:\n    log_path: ${no.such.key}\n")


def test_actor_critic_needs_a_value_head(tmp_path: Path) -> None:
    msg = _error(tmp_path, "actor:\n  model: {preset: tiny, add_value_head: false}\n")
    assert "add_value_head" in msg


@pytest.mark.parametrize(("spec", "world", "ranks"), [
    ("all", 4, [0, 1, 2, 3]), ("0-3", 8, [0, 1, 2, 3]), ("0-1,4,6-7", 8, [0, 1, 4, 6, 7]), (2, 4, [2]),
])
def test_device_sets(spec: str | int, world: int, ranks: list[int]) -> None:
    assert parse_device_set(spec, world) == ranks


def test_placement_of_components() -> None:
    shared = ClusterConfig(component_placement={"env,rollout,actor": "all"})
    assert shared.placement(2) == {"env": [0, 1], "rollout": [0, 1], "actor": [0, 1]}
    split = ClusterConfig(component_placement={"env": "0-3", "rollout": "4-7", "actor": "0-7"})
    assert split.placement(8)["rollout"] == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="only 4 exist"):
        split.placement(4)
    with pytest.raises(ValueError, match="does not place"):
        ClusterConfig(component_placement={"env": "all", "actor": "all"})
    with pytest.raises(ValueError, match='Did you mean "rollout"'):
        ClusterConfig(component_placement={"env,rolout,actor": "all"})


def test_every_field_is_described() -> None:
    from vlarl_cli.config.schema import Section

    def walk(model: type[Section]) -> list[str]:
        missing = []
        for name, info in model.model_fields.items():
            if not info.description:
                missing.append(f"{model.__name__}.{name}")
            from vlarl_cli.config.loading import _section_type

            sub = _section_type(info.annotation)
            if sub is not None:
                missing += walk(sub)
        return missing

    assert walk(VlarlConfig) == []


def test_resolved_yaml_is_plain_data() -> None:
    data = yaml.safe_load(to_yaml(load_config("libero_tiny_ppo").config))
    assert data["actor"]["model"]["preset"] == "tiny"
    assert data["env"]["train"]["task_suite_name"] == "libero_spatial"


def test_readme_config_reference_is_current() -> None:
    from vlarl_cli.config.reference import BEGIN, END, render

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index(BEGIN) + len(BEGIN):readme.index(END)]
    assert section.strip() == render().strip(), "run: python -m vlarl_cli.config.reference --write"


def test_gae_with_action_level_rewards_needs_action_level_values() -> None:
    with pytest.raises(ConfigError, match="value_type: action_level") as err:
        load_config("libero_tiny_ppo", ["algorithm.reward_type=action_level"])
    assert "reward_type chunk_level" in str(err.value)


# --------------------------------------------------------------------------------------------------
# config files at the edges (issue 18)

QUICKSTART_BODY = "actor:\n  model: {preset: tiny}\nrunner:\n  max_epochs: 7\n"


@pytest.mark.parametrize("name", ["my.yml", "my_config", "v1.2.yaml.bak"])
def test_yml_and_extension_less_files_load(tmp_path: Path, name: str) -> None:
    sub = tmp_path / "env"
    sub.mkdir()
    (sub / "mine.yaml").write_text("max_episode_steps: 33\n")
    path = tmp_path / name
    # a `defaults:` entry next to the file is still found when the file is not <name>.yaml
    path.write_text("defaults:\n  - env/mine@env.train\n  - _self_\n" + QUICKSTART_BODY)
    loaded = load_config(path)
    assert loaded.config.runner.max_epochs == 7 and loaded.config.env.train.max_episode_steps == 33


@pytest.mark.parametrize(("body", "words"), [
    (b"", "is empty"), (b"null\n", "is empty"), (b"~\n", "is empty"),
    (b"- a\n- b\n", "not a mapping"), (b"42\n", "not a mapping"),
    (b"\x00\x01\x02binary", "binary file"), (b"\xff\xfe\xfa garbage", "not UTF-8"),
    (b"actor:\n  model: {preset: tiny\n", "YAML syntax error at line 3"),
    (b"actor:\n\tmodel: x\n", "YAML syntax error at line 2"),
])
def test_files_that_are_not_configs_say_so(tmp_path: Path, body: bytes, words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(body)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert words in info.value.problem and "defaults" not in (info.value.fix or "")


def test_circular_defaults_are_named(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("defaults:\n  - b\n")
    (tmp_path / "b.yaml").write_text("defaults:\n  - a\n")
    with pytest.raises(ConfigError, match=r"circle: a.yaml -> b.yaml -> a.yaml"):
        load_config(tmp_path / "a.yaml")


def test_tilde_deletes_a_key_back_to_its_default(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(QUICKSTART_BODY)
    assert load_config(path).config.runner.max_epochs == 7
    default = VlarlConfig.model_fields["runner"].default_factory().max_epochs  # type: ignore[misc]
    assert default != 7 and load_config(path, ["~runner.max_epochs"]).config.runner.max_epochs == default
    with pytest.raises(ConfigError, match="Could not delete") as info:
        load_config(path, ["~runner.no_such_key"])
    assert "--print-config" in (info.value.fix or "")


def test_rlinf_fsdp_gradient_checkpointing_turns_on_the_policys() -> None:
    """RLinf's FSDP manager reads actor.fsdp_config.gradient_checkpointing; vlarl's policies read
    actor.model.gradient_checkpointing: RLinf's key turns it on (was accepted and ignored)."""
    from vlarl_cli.config.loading import load_config

    assert not load_config("libero_tiny_ppo", []).config.actor.model.gradient_checkpointing
    on = load_config("libero_tiny_ppo", ["actor.fsdp_config.gradient_checkpointing=True"]).config
    assert on.actor.model.gradient_checkpointing and on.actor.model.preset == "tiny"
    assert load_config("libero_tiny_ppo", ["actor.model.gradient_checkpointing=True"]).config.actor.model.gradient_checkpointing
    assert load_config("libero_10_ppo_openvlaoft", ["actor.fsdp_config.gradient_checkpointing=True"]
                       ).config.actor.model.gradient_checkpointing
