"""The official variant (the OFT authors' layout): L1-regression head + Gaussian, proprio token, two images,
STOP token, side files; routing and refusals; RLinf's critic and evaluation sampling."""

from __future__ import annotations

import math

import pytest
import torch

from vlarl_cli.errors import CheckpointError, ConfigError
from vlarl_cli.policies.base import Policy
from vlarl_cli.policies.openvla_oft.checkpoint import load_policy, save_policy
from vlarl_cli.policies.openvla_oft.processing import pixel_values
from vlarl_cli.policies.openvla_oft.side_files import find_side_files, load_side_file

OFFICIAL = {"implement_version": "official", "action_head": "l1_regression", "use_proprio": True,
            "num_images_in_input": 2}


def test_gaussian_logprobs_recompute_and_match_the_hand_formula(make_policy, make_obs):
    policy = make_policy(**OFFICIAL, add_value_head=True)
    assert isinstance(policy, Policy)
    out = policy.sample(make_obs(batch=3), generator=torch.Generator().manual_seed(1))
    assert out.replay["images"].shape == (3, 2, 28, 28, 3) and out.replay["proprio"].shape == (3, 8)
    assert out.replay["normalized_actions"].shape == out.logprobs.shape == (3, 8, 7)
    ev = policy.evaluate(out.replay)
    assert torch.allclose(ev.logprobs, out.logprobs, atol=1e-5, rtol=0)
    # log N(a; mu, sigma) = -(a - mu)^2 / (2 sigma^2) - log sigma - log(2 pi) / 2, sigma = exp(-2.5 + noise)
    with torch.no_grad():
        _, hidden = policy._forward(out.replay)
        mu = policy.action_head(hidden, 8)
    sigma = policy.actor_logstd.detach().exp()
    a = out.replay["normalized_actions"]
    hand = -((a - mu) ** 2) / (2 * sigma**2) - sigma.log() - 0.5 * math.log(2 * math.pi)
    assert torch.allclose(out.logprobs, hand, atol=1e-4)
    assert torch.allclose(ev.entropy, (0.5 * math.log(2 * math.pi * math.e) + sigma.log()).expand(3, 8, 7), atol=1e-5)
    # the std is learned: the log-prob has a gradient wrt actor_logstd
    policy.evaluate(out.replay).logprobs.sum().backward()
    assert policy.actor_logstd.grad is not None and policy.actor_logstd.grad.abs().sum() > 0


def test_deterministic_returns_the_regressed_mean(make_policy, make_obs):
    policy = make_policy(**OFFICIAL)
    obs = make_obs(batch=2)
    out = policy.sample(obs, deterministic=True)
    inputs = policy.processor.prepare(obs)
    with torch.no_grad():
        _, hidden = policy._forward(inputs)
        mean = policy.action_head(hidden, 8)
    assert torch.equal(out.replay["normalized_actions"], mean) and torch.equal(out.logprobs, torch.zeros(2, 8, 7))
    assert torch.allclose(out.actions, policy.processor.normalized_to_env(mean))


def test_official_layout_appends_proprio_after_patches_and_stop_after_the_slots(make_policy, make_obs):
    policy = make_policy(**OFFICIAL)
    inputs = policy.processor.prepare(make_obs(batch=2))
    seq, valid = policy.embed_sequence(pixel_values(inputs["images"]), inputs["tokens"], inputs["token_mask"],
                                       inputs["proprio"])
    n_patch, length, t = 2 * 4, inputs["tokens"].shape[1], 56  # two 28 px images = 2 x 4 patches
    assert seq.shape[1] == 1 + n_patch + 1 + (length - 1) + t + 1
    with torch.no_grad():
        proprio_tok = policy.proprio_projector(inputs["proprio"])[:, 0]
        stop = policy.language_model.get_input_embeddings()(torch.tensor([3]))[0]
    assert torch.allclose(seq[:, 1 + n_patch], proprio_tok)
    assert torch.equal(seq[:, -1], stop.expand(2, -1)) and bool(valid[:, -1].all())
    assert torch.equal(seq[:, -1 - t:-1], torch.zeros(2, t, seq.shape[-1]))
    # the proprio token matters (a different state changes the actions)
    obs2 = make_obs(batch=2)
    obs2["states"] = obs2["states"] + 0.5
    a1 = policy.sample(make_obs(batch=2), deterministic=True).actions
    a2 = policy.sample(obs2, deterministic=True).actions
    assert not torch.allclose(a1, a2)


def test_official_checkpoint_roundtrip_through_side_files(make_policy, make_obs, tmp_path):
    policy = make_policy(**OFFICIAL, add_value_head=True)
    save_policy(policy, tmp_path / "hf", format="openvla_hf")
    side = find_side_files(tmp_path / "hf")
    assert sorted(side) == ["action_head", "proprio_projector"]
    assert side["action_head"].name == "action_head--0_checkpoint.pt"
    assert set(load_side_file(side["action_head"])) == set(policy.action_head.state_dict())
    # the upstream config.json knows nothing of our layout: strip vlarl_arch's routing fields so the side
    # files alone decide (as with a checkpoint from the OFT authors)
    import json

    cfg_file = tmp_path / "hf" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    for k in ("implement_version", "action_head", "use_proprio", "num_images_in_input", "l1_hidden"):
        cfg["vlarl_arch"].pop(k)
    cfg_file.write_text(json.dumps(cfg))
    loaded = load_policy(tmp_path / "hf", overrides={"add_value_head": True, "unnorm_key": "libero_10"})
    assert loaded.load_report.details["implement_version"] == "official" and loaded.load_report.details["action_head"] == "l1_regression"
    assert loaded.cfg.num_images_in_input == 2 and loaded.cfg.use_proprio and loaded.cfg.proprio_dim == 8
    assert "actor_logstd" in loaded.load_report.initialized
    obs = make_obs(batch=2)
    assert torch.equal(loaded.sample(obs, deterministic=True).actions, policy.sample(obs, deterministic=True).actions)


def test_l1_checkpoint_is_never_decoded_through_the_token_head(make_policy, tmp_path):
    save_policy(make_policy(**OFFICIAL), tmp_path / "hf", format="openvla_hf")
    with pytest.raises(CheckpointError, match="L1-regression action head") as err:
        load_policy(tmp_path / "hf", overrides={"implement_version": "rlinf", "unnorm_key": "libero_10"})
    assert "implement_version: official" in (err.value.fix or "")
    with pytest.raises(CheckpointError, match="proprio projector"):
        load_policy(tmp_path / "hf", overrides={"use_proprio": False, "unnorm_key": "libero_10"})


def test_side_files_are_loaded_as_tensors_only(tmp_path):
    torch.save({"module.model.fc1.weight": torch.ones(2, 2)}, tmp_path / "ok.pt")
    assert list(load_side_file(tmp_path / "ok.pt")) == ["model.fc1.weight"]  # DDP prefix stripped
    torch.save({"model.fc1.weight": torch.ones(2), "step": 3}, tmp_path / "int.pt")
    with pytest.raises(CheckpointError, match="non-tensor"):
        load_side_file(tmp_path / "int.pt")
    torch.save({"w": torch.ones(2), "code": ConfigError("x", "y")}, tmp_path / "obj.pt")
    with pytest.raises(CheckpointError, match="tensors-only"):
        load_side_file(tmp_path / "obj.pt")  # weights_only refuses to unpickle arbitrary classes
    for name in ("action_head--10_checkpoint.pt", "action_head--20_checkpoint.pt"):
        torch.save({"w": torch.ones(1)}, tmp_path / name)
    with pytest.raises(CheckpointError, match="exactly one"):
        find_side_files(tmp_path)


@pytest.mark.parametrize("name", ["noisy_action_projector--5_checkpoint.pt", "vision_backbone--5_checkpoint.pt"])
def test_side_files_of_unimplemented_variants_are_refused(tmp_path, name):
    torch.save({"w": torch.ones(1)}, tmp_path / name)
    with pytest.raises(CheckpointError, match="does not implement"):
        find_side_files(tmp_path)


def test_missing_dataset_statistics_is_an_error_naming_where_it_looked(make_policy, tmp_path):
    save_policy(make_policy(), tmp_path / "hf", format="openvla_hf")
    (tmp_path / "hf" / "dataset_statistics.json").unlink()
    import json

    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["norm_stats"] = {}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="No dataset statistics") as err:
        load_policy(tmp_path / "hf")
    assert "dataset_statistics.json" in err.value.problem and "config.json" in err.value.problem
    # a vlarl folder saved from a model without statistics says so and loads with identity actions
    save_policy(make_policy(stats=False), tmp_path / "v")
    assert load_policy(tmp_path / "v").processor.stats is None


def test_action_level_critic_gives_one_value_per_action(make_policy, make_obs):
    policy = make_policy(add_value_head=True, value_type="action_level")
    assert [n for n, _ in policy.value_head.named_parameters()] == [
        "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "mlp.4.weight"]  # RLinf's critic keys
    out = policy.sample(make_obs(batch=3))
    per_action = policy.action_values(out.replay)
    assert per_action.shape == (3, 8)
    # the contract carries all C values (GAE over action steps with reward_type action_level)
    assert out.values.shape == (3, 8)
    assert torch.allclose(out.values, per_action, atol=1e-6)
    assert torch.allclose(policy.evaluate(out.replay).values.detach(), per_action, atol=1e-6)
    inputs = out.replay
    with torch.no_grad():
        _, hidden = policy._forward(inputs)
    # read at the last prompt token: the position that predicts action token 0 (RLinf _compute_values)
    assert torch.allclose(per_action, policy.value_head(hidden[:, 0]), atol=1e-6)


def test_rlinf_critic_weights_load_by_name(make_policy, make_obs):
    policy = make_policy(add_value_head=True, value_type="action_level")
    rlinf_critic = {"mlp.0.weight": torch.randn(32, 64), "mlp.0.bias": torch.randn(32),
                    "mlp.2.weight": torch.randn(16, 32), "mlp.2.bias": torch.randn(16),
                    "mlp.4.weight": torch.randn(8, 16)}
    policy.value_head.load_state_dict(rlinf_critic, strict=True)
    x = torch.randn(2, 64)
    h = torch.nn.functional.gelu(x @ rlinf_critic["mlp.0.weight"].T + rlinf_critic["mlp.0.bias"])
    h = torch.nn.functional.gelu(h @ rlinf_critic["mlp.2.weight"].T + rlinf_critic["mlp.2.bias"])
    assert torch.allclose(policy.value_head(x), h @ rlinf_critic["mlp.4.weight"].T, atol=1e-5)


def test_eval_sampling_follows_the_protocol(make_policy, make_obs):
    policy = make_policy()
    obs = make_obs(batch=4)
    policy.configure_eval("standard")
    greedy = [policy.sample(obs, deterministic=True).replay["action_tokens"] for _ in range(2)]
    assert torch.equal(greedy[0], greedy[1])
    policy.configure_eval("rlinf")  # RLinf's OFT eval configs: do_sample, temperature 1.6
    assert (policy.eval_do_sample, policy.eval_temperature) == (True, 1.6)
    sampled = policy.sample(obs, deterministic=True, generator=torch.Generator().manual_seed(0))
    assert not torch.equal(sampled.replay["action_tokens"], greedy[0])
    assert torch.equal(sampled.logprobs, torch.zeros(4, 8, 7))
    with pytest.raises(ConfigError, match="protocol"):
        policy.configure_eval("lerobot")


@pytest.mark.parametrize(("protocol", "expected"), [("rlinf", (True, 1.6)), ("standard", (False, None))])
def test_evaluation_configures_the_protocols_sampling_and_the_card_records_it(make_policy, monkeypatch,
                                                                              protocol, expected):
    """evaluate_policy sets the policy up for its protocol before planning; the card says what ran."""
    from vlarl_cli.training.evaluation import EvalSettings, api

    policy = make_policy()
    cards, real_make_card = [], api.make_card

    class Stop(Exception):
        pass

    def capture(settings, pol, info, plan):
        cards.append(real_make_card(settings, pol, info, plan))
        raise Stop

    monkeypatch.setattr(api, "make_card", capture)
    with pytest.raises(Stop):
        api.evaluate_policy(policy, EvalSettings(suite="libero_10", trials=1, resolution=128, protocol=protocol))
    sampling = cards[0]["eval_sampling"]
    want_temperature = expected[1] if expected[1] is not None else policy.cfg.temperature
    assert (sampling["do_sample"], sampling["temperature"]) == (expected[0], want_temperature)


def test_l1_head_reads_each_chunk_step_from_its_seven_hidden_states():
    """openvla-oft L1RegressionActionHead: hidden [B, C*A, D] -> [B, C, A*D] (step c takes tokens 7c..7c+6)
    -> MLP-ResNet (LayerNorm, fc1, ReLU, blocks x + ReLU(W LN(x) + b), LayerNorm, fc2), by hand."""
    from vlarl_cli.policies.openvla_oft.heads import L1RegressionHead

    torch.manual_seed(0)
    head = L1RegressionHead(llm_width=4, hidden=5, action_dim=7, num_blocks=2)
    for p in head.parameters():
        torch.nn.init.normal_(p)
    assert sorted(head.state_dict()) == sorted(  # the keys of action_head--*_checkpoint.pt
        ["model.layer_norm1.weight", "model.layer_norm1.bias", "model.fc1.weight", "model.fc1.bias",
         "model.layer_norm2.weight", "model.layer_norm2.bias", "model.fc2.weight", "model.fc2.bias"]
        + [f"model.mlp_resnet_blocks.{i}.ffn.{j}.{w}" for i in range(2) for j in (0, 1) for w in ("weight", "bias")])
    hidden = torch.randn(2, 3 * 7, 4)
    m = head.model
    ln = torch.nn.functional.layer_norm

    def by_hand(x):
        x = torch.relu(m.fc1(ln(x, (28,), m.layer_norm1.weight, m.layer_norm1.bias, 1e-5)))
        for blk in m.mlp_resnet_blocks:
            norm, lin = blk.ffn[0], blk.ffn[1]
            x = x + torch.relu(lin(ln(x, (5,), norm.weight, norm.bias, 1e-5)))
        return m.fc2(ln(x, (5,), m.layer_norm2.weight, m.layer_norm2.bias, 1e-5))

    with torch.no_grad():
        out = head(hidden, 3)
        for c in range(3):
            step = hidden[:, 7 * c: 7 * c + 7].reshape(2, 28)  # the 7 action-token states of step c, in order
            torch.testing.assert_close(out[:, c], by_hand(step), atol=1e-5, rtol=1e-5)


def test_a_critic_of_the_earlier_layout_is_refused_with_the_way_out(make_policy, tmp_path):
    from safetensors.torch import load_file
    from safetensors.torch import save_file as save_st

    save_policy(make_policy(add_value_head=True), tmp_path / "ck")
    sd = load_file(str(tmp_path / "ck" / "model.safetensors"))
    sd = {k: v for k, v in sd.items() if not k.startswith("value_head.")}
    sd.update({"value_head.body.0.weight": torch.ones(32, 64), "value_head.body.0.bias": torch.ones(32),
               "value_head.out.weight": torch.ones(1, 32), "value_head.out.bias": torch.ones(1)})
    save_st(sd, str(tmp_path / "ck" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="earlier vlarl") as err:
        load_policy(tmp_path / "ck")
    assert "strict=False" in (err.value.fix or "")
    loaded = load_policy(tmp_path / "ck", strict=False)
    assert "value_head.out.bias" in loaded.load_report.unexpected


def test_official_critic_position_is_a_printed_deviation_from_rlinf(make_policy):
    """RLinf's official code reads its critic k + 1 slots after the last prompt token (k: the row's padding;
    checked on RLinf's code in tests/conformance/rlinf_oft); vlarl reads the last prompt token and says so."""
    with pytest.warns(UserWarning, match="RLinf's official code reads the slot k \\+ 1"):
        make_policy(**OFFICIAL, add_value_head=True)
