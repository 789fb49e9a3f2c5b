"""The policy contract on tiny GR00T models: shapes, exact log-prob recomputation, determinism,
dropout, head-only training and N1.6 exploration noise."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.policies.base import Policy, index_replay, stack_replays


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_sample_shapes_and_replay(version, policy_factory, obs_factory) -> None:
    policy = policy_factory(version, num_action_chunks=5)
    assert isinstance(policy, Policy)
    out = policy.sample(obs_factory(3), generator=torch.Generator().manual_seed(0))
    assert out.actions.shape == (3, 5, 7) and out.logprobs.shape == (3, 5, 7) and out.values.shape == (3,)
    assert out.actions.dtype == torch.float32 and out.logprobs.dtype == torch.float32
    with torch.no_grad():  # RLinf's critic on the mean of all VL tokens (+ state token)
        torch.testing.assert_close(out.values, policy.values(policy.encode(out.replay)), rtol=0, atol=0)
    assert set(out.replay) == {keys.MAIN_IMAGES, keys.WRIST_IMAGES, "input_ids", "attention_mask", "state",
                               "embodiment_id", "chain", "denoise_index"}
    cfg = policy.config
    assert out.replay["chain"].shape == (3, 5, cfg.action_horizon, cfg.action_dim)  # K=4 -> 5 grid points
    assert out.replay[keys.MAIN_IMAGES].dtype == torch.uint8
    assert all(v.shape[0] == 3 for v in out.replay.values())
    assert ((out.replay["denoise_index"] >= 0) & (out.replay["denoise_index"] < 4)).all()
    # gripper in the env convention; N1.6 clips the model action to [-1, 1] before un-normalising (then
    # RLinf's N(0, 0.1^2) exploration noise is clamped to [-1, 1]); N1.5's Normalizer.inverse does not clip
    assert set(out.actions[..., 6].unique().tolist()) <= {-1.0, 1.0}
    if version == "n1.6":
        assert out.actions[..., :6].abs().max() <= 1.0


CASES = [(v, m, j) for v in ("n1.5", "n1.6") for m, j in
         (("flow_sde", False), ("flow_sde", True), ("flow_noise", False), ("flow_cps", False))]


@pytest.mark.parametrize(("version", "method", "joint"), CASES)
def test_logprob_recomputation_equals_sampled(version, method, joint, policy_factory, obs_factory) -> None:
    policy = policy_factory(version, noise_method=method, joint_logprob=joint, denoising_steps=3)
    policy.train()
    out = policy.sample(obs_factory(4, seed=1), generator=torch.Generator().manual_seed(2))
    assert out.logprobs.abs().sum() > 0
    ev = policy.evaluate(out.replay)
    torch.testing.assert_close(ev.logprobs, out.logprobs, rtol=0, atol=1e-5)
    assert (ev.entropy is not None) == (method == "flow_noise")
    if ev.entropy is not None:
        # entropy of the learned std, which lies in [0.08, 0.16]: 0.5 log(2 pi e sigma^2)
        lo, hi = (0.5 * torch.log(2 * torch.pi * torch.e * torch.tensor(s) ** 2) for s in (0.08, 0.16))
        assert ((ev.entropy >= lo - 1e-5) & (ev.entropy <= hi + 1e-5)).all()
    # recomputation on a shuffled sub-batch (as PPO minibatches do) gives the same rows
    perm = torch.tensor([2, 0, 3])
    ev2 = policy.evaluate(index_replay(out.replay, perm))
    torch.testing.assert_close(ev2.logprobs, out.logprobs[perm], rtol=0, atol=1e-5)
    # and the log-probs are differentiable w.r.t. the head
    ev.logprobs.sum().backward()
    grads = [p.grad for p in policy.action_head.model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)


def test_replays_stack_across_calls(policy_factory, obs_factory) -> None:
    policy = policy_factory("n1.6")
    outs = [policy.sample(obs_factory(2, seed=s), generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    ev = policy.evaluate(stack_replays([o.replay for o in outs]))
    torch.testing.assert_close(ev.logprobs, torch.cat([o.logprobs for o in outs]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_deterministic_mode(version, policy_factory, obs_factory) -> None:
    policy = policy_factory(version)
    obs = obs_factory(2)
    a = policy.sample(obs, deterministic=True, generator=torch.Generator().manual_seed(0))
    b = policy.sample(obs, deterministic=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.actions, b.actions) and torch.equal(a.logprobs, torch.zeros_like(a.logprobs))
    assert (a.replay["denoise_index"] == -1).all()
    assert torch.equal(policy.evaluate(a.replay).logprobs, torch.zeros_like(a.logprobs))


def test_disable_dropout_makes_evaluate_repeatable_in_train_mode(policy_factory, obs_factory) -> None:
    obs = obs_factory(2)
    for disable in (True, False):
        policy = policy_factory("n1.5", disable_dropout=disable)
        policy.train()
        out = policy.sample(obs, generator=torch.Generator().manual_seed(0))
        e1, e2 = policy.evaluate(out.replay), policy.evaluate(out.replay)
        if disable:
            assert torch.equal(e1.logprobs, e2.logprobs)
            torch.testing.assert_close(e1.logprobs, out.logprobs, rtol=0, atol=1e-5)
        else:  # the control: with GR00T's p=0.2 dropout active two passes disagree
            assert not torch.equal(e1.logprobs, e2.logprobs)


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_head_only_training_leaves_backbone_bit_identical(version, policy_factory, obs_factory) -> None:
    if version == "n1.6":  # its config trains the top LLM layers: head-only is a deviation from RLinf, printed
        with pytest.warns(UserWarning, match=r"train_expert_only=True freezes the backbone .*tune_top_llm_layers"):
            policy = policy_factory(version, train_expert_only=True)
    else:
        policy = policy_factory(version, train_expert_only=True)
    assert not any(p.requires_grad for p in policy.backbone.parameters())
    before_backbone = {k: v.clone() for k, v in policy.backbone.state_dict().items()}
    before_head = {k: v.clone() for k, v in policy.action_head.state_dict().items()}
    policy.train()
    assert not policy.backbone.training  # frozen modules stay in eval mode
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.01)
    assert {id(p) for p in opt.param_groups[0]["params"]} == {id(p) for p in policy.action_head.parameters()}
    out = policy.sample(obs_factory(3), generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        ev = policy.evaluate(out.replay)
        loss = -ev.logprobs.mean() + (ev.values - 1.0).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    for k, v in policy.backbone.state_dict().items():
        assert torch.equal(v, before_backbone[k]), k
    changed = [k for k, v in policy.action_head.state_dict().items() if not torch.equal(v, before_head[k])]
    assert any(k.startswith("value_head.") for k in changed) and any(k.startswith("model.") for k in changed)


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_value_loss_trains_the_shared_layers_as_rlinf(version, policy_factory, obs_factory) -> None:
    """RLinf's GR00T never detaches the critic input: the value loss alone reaches the action head's layers
    outside the value MLP that the actor also uses (the state encoder at least)."""
    policy = policy_factory(version)
    policy.train()
    out = policy.sample(obs_factory(2), generator=torch.Generator().manual_seed(0))
    policy.evaluate(out.replay).values.pow(2).mean().backward()
    shared = {n for n, p in policy.action_head.named_parameters()
              if not n.startswith("value_head.") and p.grad is not None and p.grad.abs().max() > 0}
    assert any("state_encoder" in n for n in shared), sorted(shared)


def test_detach_critic_input_true_is_reported_not_followed() -> None:
    from vlarl_cli.policies import gr00t

    settings = gr00t.ModelSettings(model_type="gr00t", preset="tiny", detach_critic_input=True)
    with pytest.warns(UserWarning, match="not read by RLinf's GR00T"):
        gr00t.build_policy(settings)


def _trainable(policy: Any) -> set[str]:
    return {n for n, p in policy.named_parameters() if p.requires_grad}


def _n16_policy(**flags: Any) -> Any:
    """A tiny N1.6 policy whose (checkpoint) config carries ``flags``; 3 LLM layers so that "top" means something."""
    from vlarl_cli.policies.gr00t.config import ModelSettings, preset
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    torch.manual_seed(0)
    cfg = preset("tiny", "n1.6").replace(select_layer=3, **flags)
    s = ModelSettings(model_type="gr00t_n1d6", preset="tiny")
    return Gr00tPolicy(cfg, s, default_modality(s.effective_embodiment_tag, cfg))


def test_n16_trainable_set_is_the_config_s_as_isaac_gr00t(obs_factory) -> None:
    """Isaac-GR00T's EagleBackbone.set_trainable_parameters with Gr00tN1d6Config's defaults (tune_llm / tune_visual
    False, tune_top_llm_layers 4; the head's tune_* True), which RLinf keeps (it passes no flags): the top LLM layers
    and the whole head train, the embeddings, the LLM's final norm, the vision tower and mlp1 do not."""
    policy = _n16_policy(tune_top_llm_layers=2)
    assert policy.config.tune_top_llm_layers == 2 and preset_top("n1.6") == 4 and preset_top("n1.5") == 0
    lm = "backbone.model.language_model.model."
    want = {n for n, _ in policy.named_parameters()
            if n.startswith("action_head.") or n.startswith((lm + "layers.1.", lm + "layers.2."))}
    assert _trainable(policy) == want
    policy.train()
    out = policy.sample(obs_factory(2), generator=torch.Generator().manual_seed(0))
    ev = policy.evaluate(out.replay)
    (-ev.logprobs.mean() + ev.values.pow(2).mean()).backward()
    grads = {n for n, p in policy.named_parameters() if p.grad is not None and p.grad.abs().max() > 0}
    assert any(n.startswith(lm + "layers.1.") for n in grads) and any(n.startswith(lm + "layers.2.") for n in grads)
    # the head's flags: frozen projectors / DiT / VL LayerNorm, as Gr00tN1d6ActionHead.set_trainable_parameters
    frozen = _n16_policy(tune_projector=False, tune_diffusion_model=False, tune_vlln=False, tune_llm=True)
    names = _trainable(frozen)
    assert not any(n.startswith(("action_head.model.", "action_head.state_encoder.", "action_head.vlln.",
                                 "action_head.position_embedding.", "action_head.action_decoder.")) for n in names)
    assert any(n.startswith("action_head.value_head.") for n in names)  # the critic always trains
    assert {n for n in names if n.startswith("backbone.")} == {
        n for n, _ in frozen.named_parameters() if n.startswith("backbone.model.language_model.")}


def preset_top(version: str) -> int:
    from vlarl_cli.policies.gr00t.config import preset

    return int(preset("full", version).tune_top_llm_layers or 0)


def test_n15_trains_eagle_linear_and_the_head_as_rlinf() -> None:
    """RLinf passes tune_visual=False, tune_llm=False for N1.5: upstream EagleBackbone first makes every tensor
    trainable, so the projection eagle_linear trains with the head; vision, mlp1 and the LLM do not."""
    from vlarl_cli.policies.gr00t.config import ModelSettings, preset
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    cfg = preset("tiny", "n1.5").replace(project_to_dim=64)
    s = ModelSettings(model_type="gr00t", preset="tiny")
    policy = Gr00tPolicy(cfg, s, default_modality(s.effective_embodiment_tag, cfg))
    assert {n for n in _trainable(policy) if n.startswith("backbone.")} == {
        "backbone.eagle_linear.weight", "backbone.eagle_linear.bias"}
    assert all(p.requires_grad for p in policy.action_head.parameters())


def test_settings_override_the_config_flags_with_a_printed_deviation(policy_factory) -> None:
    with pytest.warns(UserWarning, match=r"tune_top_llm_layers=1 \(the checkpoint config says 4\).*differs from RLinf"):
        policy = policy_factory("n1.6", tune_top_llm_layers=1)
    layers = policy.backbone.eagle.language_model.model.layers
    assert all(p.requires_grad for p in layers[-1].parameters())
    assert not any(p.requires_grad for p in layers[0].parameters())
    assert not any(p.requires_grad for p in policy.backbone.eagle.vision_model.parameters())


def test_n16_exploration_noise_is_outside_the_logprob(policy_factory, obs_factory) -> None:
    obs = obs_factory(2)
    outs = {}
    for scale in (0.0, 0.1):
        policy = policy_factory("n1.6", action_noise_scale=scale)
        outs[scale] = policy.sample(obs, generator=torch.Generator().manual_seed(5))
    a, b = outs[0.0], outs[0.1]
    assert torch.equal(a.logprobs, b.logprobs) and torch.equal(a.replay["chain"], b.replay["chain"])
    diff = (a.actions[..., :6] - b.actions[..., :6]).abs()
    assert diff.max() > 0 and diff.max() < 0.6  # N(0, 0.1^2) noise (then clamped)
    assert b.actions[..., :6].abs().max() <= 1.0


def test_value_variants(policy_factory, obs_factory) -> None:
    policy = policy_factory("n1.5", value_after_vlm=True)
    assert policy.action_head.value_head.in_dim == policy.config.backbone_embedding_dim
    with torch.no_grad():
        policy.action_head.value_head.mlp[-1].weight.zero_()
        policy.action_head.value_head.mlp[-1].bias.fill_(0.25)
    out = policy.sample(obs_factory(2))
    assert torch.equal(out.values, torch.full((2,), 0.25))
    assert torch.equal(policy_factory("n1.5", add_value_head=False).sample(obs_factory(2)).values, torch.zeros(2))


def test_use_proprio_false_zeroes_state(policy_factory, obs_factory) -> None:
    policy = policy_factory("n1.5", use_proprio=False)
    replay = policy.prepare_inputs(obs_factory(2))
    assert torch.equal(replay["state"], torch.zeros_like(replay["state"]))
    on = policy_factory("n1.5").prepare_inputs(obs_factory(2))["state"]
    assert on[:, :8].abs().sum() > 0 and torch.equal(on[:, 8:], torch.zeros_like(on[:, 8:]))


def test_bad_observation_is_reported(policy_factory, obs_factory) -> None:
    policy = policy_factory("n1.5")
    obs = obs_factory(2)
    obs[keys.MAIN_IMAGES] = obs[keys.MAIN_IMAGES].float()
    with pytest.raises(ValueError, match="uint8"):
        policy.sample(obs)
    obs = obs_factory(2)
    obs[keys.TASK_DESCRIPTIONS] = ["only one"]
    with pytest.raises(ValueError, match="batch sizes differ"):
        policy.sample(obs)


def test_gradient_checkpointing_gives_identical_gradients(policy_factory, obs_factory) -> None:
    grads = []
    for flag in (False, True):
        policy = policy_factory("n1.6", gradient_checkpointing=flag)
        policy.train()
        out = policy.sample(obs_factory(2), generator=torch.Generator().manual_seed(0))
        policy.evaluate(out.replay).logprobs.sum().backward()
        grads.append({n: p.grad.clone() for n, p in policy.action_head.model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], rtol=0, atol=1e-6)


def test_row_streams_make_sampling_independent_of_batching(policy_factory, obs_factory,
                                                            split_equals_whole) -> None:
    split_equals_whole(policy_factory("n1.6").eval(), obs_factory(batch=4), exact_keys=("denoise_index",))


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_policy_builds_the_eagle_chat_prompt_of_its_release(version, obs_factory) -> None:
    """prepare_inputs with a Qwen tokenizer: the release's template, RLinf's 0-padding to padding_value."""
    from pathlib import Path

    from vlarl_cli.policies.gr00t.config import ModelSettings, preset
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy
    from vlarl_cli.policies.gr00t.processing import eagle_prompt_text, formalize_language
    from vlarl_cli.policies.gr00t.tokenizer import QwenTokenizer

    tok = QwenTokenizer(Path(__file__).resolve().parents[2] / "fixtures" / "gr00t" / "tokenizer")
    cfg = preset("tiny", version).replace(prompt_style="eagle_chat", vocab_size=3300, padding_value=120,
                                          image_token_id=tok.token_to_id("<IMG_CONTEXT>"))
    s = ModelSettings(model_type="gr00t" if version == "n1.5" else "gr00t_n1d6", preset="tiny")
    policy = Gr00tPolicy(cfg, s, default_modality(s.effective_embodiment_tag, cfg), tokenizer=tok)
    obs = obs_factory(2)
    obs[keys.TASK_DESCRIPTIONS] = ["Open the top drawer, please.", "turn on the stove"]
    replay = policy.prepare_inputs(obs)
    assert replay["input_ids"].shape == (2, 120)
    for row, task in enumerate(obs[keys.TASK_DESCRIPTIONS]):
        text = formalize_language(task) if version == "n1.6" else task  # N1.6 formalizes, N1.5 does not
        want = tok.encode(eagle_prompt_text(text, version=version, num_images=2,
                                            tokens_per_image=cfg.tokens_per_image))
        n = len(want)
        assert replay["input_ids"][row, :n].tolist() == want and replay["attention_mask"][row, :n].eq(1).all()
        assert replay["input_ids"][row, n:].eq(0).all() and replay["attention_mask"][row, n:].eq(0).all()
    with torch.no_grad():
        out = policy.sample(obs, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(out.actions).all()


def test_rlinf_state_rounding_only_in_bf16() -> None:
    from vlarl_cli.policies.gr00t.modeling import rlinf_state_rounding

    x = torch.tensor([[0.123456789, -1.00390625, 3.14159265]])
    assert torch.equal(rlinf_state_rounding(x, torch.float32), x)
    r = rlinf_state_rounding(x, torch.bfloat16)
    assert r.dtype == torch.float32 and torch.equal(r, x.bfloat16().float()) and not torch.equal(r, x)


def test_activation_estimate_counts_the_llm_layers_backward_reaches() -> None:
    """--dry-run's Qwen3 activation term: only the layers from the lowest trained one up keep activations (the
    frozen layers below run without a graph); all of them when the LLM trains; none when only the head does."""
    def qwen3_layers(policy: Any) -> int:
        return sum(s.layers for s in policy.activation_stacks() if s.name == "qwen3")

    assert qwen3_layers(_n16_policy(tune_top_llm_layers=2)) == 2
    assert qwen3_layers(_n16_policy(tune_top_llm_layers=0, tune_llm=True)) == 3
    assert qwen3_layers(_n16_policy(tune_top_llm_layers=0)) == 0
