"""--dry-run: every preset builds on the meta device with its real parameter count; memory estimates."""

from __future__ import annotations

import pytest

from vlarl_cli.config.loading import list_presets, load_config
from vlarl_cli.training.dry_run import GIB, build_meta_policy, count_parameters, estimate_memory

# Published sizes: pi0 ~3.24B live parameters (openpi), GR00T N1.5 / N1.6 "3B" class (backbone truncated at
# select_layer, so fewer live parameters), OpenVLA-OFT ~7.5B.
EXPECTED_BILLIONS = {
    "openpi": (3.1, 3.5), "gr00t": (2.2, 3.3), "gr00t_n1d6": (2.7, 3.4), "openvla_oft": (7.0, 8.0),
}


TINY_PRESETS = ("quickstart", "libero_tiny_ppo", "toy_reach_ppo", "sft_quickstart", "sft_toy_reach",  # CPU demos, tiny on purpose
                "sft_learning_run", "maniskill_pickcube_ppo_openpi", "maniskill_pickcube_ppo_openvlaoft",
                "maniskill_pickcube_grpo_openvlaoft", "maniskill_pickcube_ppo_gr00t",
                "maniskill_pickcube_ppo_gr00t_n1d6", "maniskill_pushcube_ppo_mlp")


@pytest.mark.parametrize("name", [p for p in list_presets() if p not in TINY_PRESETS])
def test_every_preset_builds_on_meta_with_its_real_size(name: str) -> None:
    config = load_config(name).config
    policy = build_meta_policy(config)
    assert all(p.device.type == "meta" for p in policy.parameters())
    params = count_parameters(policy)
    low, high = EXPECTED_BILLIONS[config.actor.model.model_type]
    assert low <= params.total / 1e9 <= high, params
    assert 0 < params.trainable <= params.total
    if config.actor.model.effective_add_value_head:
        assert params.value_head > 0


def test_memory_estimate_shards_over_actor_ranks_and_offloads() -> None:
    config = load_config("libero_10_ppo_openpi").config
    params = count_parameters(build_meta_policy(config))
    one = estimate_memory(config, params, 1)["0"]
    eight = estimate_memory(config, params, 8)["0"]
    # the recipe takes full_shard from hybrid_engines/fsdp: weights and AdamW states split 8 ways
    assert eight.weights == pytest.approx(one.weights / 8)
    assert eight.optimizer == pytest.approx(one.optimizer / 8)
    assert one.weights == pytest.approx(params.total * 4)  # fp32 master weights
    assert one.optimizer == pytest.approx(params.trainable * 8)  # AdamW: two fp32 moments
    no_shard = load_config("libero_10_ppo_openpi", ["actor.fsdp_config.sharding_strategy=no_shard"]).config
    assert estimate_memory(no_shard, params, 8)["0"].weights == pytest.approx(one.weights)
    offload = load_config("libero_10_ppo_openpi", ["actor.fsdp_config.cpu_offload=true"]).config
    est = estimate_memory(offload, params, 8)["0"]
    assert est.weights == 0 and est.host_offload == pytest.approx(eight.weights + eight.gradients + eight.optimizer)
    # 64 LIBERO envs over 8 env ranks: 8 x 1.7 GB of host memory per rank
    assert eight.env_host / GIB == pytest.approx(8 * 1.7)


@pytest.mark.parametrize("name", ["quickstart", "libero_tiny_ppo", "toy_reach_ppo"])
def test_cpu_presets_are_tiny(name: str) -> None:
    params = count_parameters(build_meta_policy(load_config(name).config))
    assert params.total < 1_000_000
