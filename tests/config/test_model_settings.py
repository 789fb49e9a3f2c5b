"""One rule for where a model setting comes from: a key in RLinf's nested block (``openpi:`` /
``rl_head_config:``) wins over the flat key, a config that gives both with different values is refused, and
the families' settings are filled by name (policies/registry.py)."""

from __future__ import annotations

import warnings

import pytest
from pydantic import ValidationError

from vlarl_cli.config.loading import load_config, to_yaml
from vlarl_cli.config.schema import ModelConfig
from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.registry import make_settings, settings_values


@pytest.mark.parametrize(("block", "key", "flat_default", "nested"), [
    ("rl_head_config", "action_noise_scale", 0.3, 0.0),  # a nested 0.0 used to lose to the flat value
    ("rl_head_config", "noise_method", "flow_sde", "flow_noise"),
    ("openpi", "train_expert_only", True, False),
    ("openpi", "value_after_vlm", False, True),
    ("openpi", "detach_critic_input", True, False),
    ("openpi", "noise_level", 0.5, 0.0),
])
def test_nested_wins_and_a_conflict_is_refused(block: str, key: str, flat_default: object, nested: object) -> None:
    model_type = "gr00t" if block == "rl_head_config" else "pi0"
    cfg = ModelConfig(model_type=model_type, preset="tiny", **{block: {key: nested}})
    assert cfg.setting(key) == nested and settings_values(cfg)[key] == nested
    same = ModelConfig(model_type=model_type, preset="tiny", **{key: nested, block: {key: nested}})
    assert same.setting(key) == nested
    with pytest.raises(ValidationError, match=rf"actor.model.{key} is .* but actor.model.{block}.{key} is"):
        ModelConfig(model_type=model_type, preset="tiny", **{key: flat_default, block: {key: nested}})


def test_aliases_follow_the_same_rule() -> None:
    cfg = ModelConfig(model_type="pi0", preset="tiny", openpi={"num_steps": 7})
    assert cfg.effective_denoising_steps == 7 and settings_values(cfg)["num_steps"] == 7
    with pytest.raises(ValidationError, match=r"denoising_steps is 3 but actor\.model\.openpi\.num_steps is 7"):
        ModelConfig(model_type="pi0", preset="tiny", denoising_steps=3, openpi={"num_steps": 7})
    with pytest.raises(ValidationError, match=r"denoising_steps is 3 but actor\.model\.num_steps"):
        ModelConfig(model_type="pi0", preset="tiny", denoising_steps=3, num_steps=5)
    with pytest.raises(ValidationError, match=r"value_after_vlm is False but actor\.model\.rl_head_config\.use_vlm_value"):
        ModelConfig(model_type="gr00t", preset="tiny", value_after_vlm=False, rl_head_config={"use_vlm_value": True})
    reinflow = ModelConfig(model_type="pi0", preset="tiny", noise_method="flow_noise", openpi={"noise_method": "reinflow"})
    assert reinflow.effective_noise_method == "flow_noise"  # an alias of the same method is no conflict


def test_a_conflicting_config_file_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"train_expert_only is True but actor\.model\.openpi\.train_expert_only is "
                                          "False") as err:
        load_config("quickstart", ["actor.model.train_expert_only=True", "actor.model.openpi.train_expert_only=False"])
    assert err.value.fix  # the CLI boundary prints it and exits 2


def test_the_resolved_dump_reloads_with_the_nested_value() -> None:
    loaded = load_config("quickstart", ["actor.model.openpi.train_expert_only=False"]).config
    text = to_yaml(loaded)
    assert loaded.actor.model.setting("train_expert_only") is False
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resolved.yaml"
        path.write_text(text)
        again = load_config(path).config
    assert again == loaded and again.actor.model.setting("train_expert_only") is False


def test_families_are_filled_by_name_and_other_families_keys_are_reported() -> None:
    cfg = ModelConfig(model_type="pi0", preset="tiny", lora_rank=7, sft_loss_reduction="openpi",
                      openpi={"noise_level": 0.25, "config_name": "pi0_libero"})
    settings = make_settings(cfg)
    assert (settings.lora_rank, settings.sft_loss_reduction, settings.noise_level, settings.config_name) == (
        7, "openpi", 0.25, "pi0_libero")
    with pytest.warns(UserWarning, match=r"actor.model.implement_version \(OpenVLA-OFT keys\) not used by model_type pi0"):
        make_settings(ModelConfig(model_type="pi0", preset="tiny", implement_version="rlinf"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_settings(ModelConfig(model_type="openvla_oft", preset="tiny", implement_version="rlinf"))


def test_a_saved_config_at_defaults_reports_no_other_family_key(tmp_path) -> None:
    """A checkpoint's config.yaml lists every key; those left at their defaults (GR00T's action_noise_scale
    0.0 in a pi0 run) are not reported when `vlarl eval` rebuilds the policy from it."""
    from vlarl_cli.config.loading import load_config, to_yaml

    path = tmp_path / "config.yaml"
    path.write_text(to_yaml(load_config("libero_tiny_ppo").config))
    model = load_config(str(path)).config.actor.model
    assert "action_noise_scale" in model.model_fields_set
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_settings(model)
    with pytest.warns(UserWarning, match=r"actor.model.action_noise_scale \(GR00T keys\) not used by model_type"):
        make_settings(model.model_copy(update={"action_noise_scale": 0.1}))
