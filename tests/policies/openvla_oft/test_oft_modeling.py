"""OftModel: attention masks, one-pass action decoding, RL head = slice of the LM head, invariances."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli.policies.openvla_oft.modeling import attention_mask_2d
from vlarl_cli.policies.openvla_oft.processing import pixel_values


def _inputs(policy, obs):
    inputs = policy.processor.prepare(obs)
    return pixel_values(inputs["images"]), inputs["tokens"], inputs["token_mask"]


def test_attention_mask_hand_example():
    valid = torch.tensor([[True, False, True, True, True, True]])  # a pad at 1; actions are the last 2
    bi = attention_mask_2d(valid, 2, "bidirectional")[0].int()
    assert bi.tolist() == [[1, 0, 1, 1, 1, 1]] * 6
    ab = attention_mask_2d(valid, 2, "action_bidirectional")[0].int()
    assert ab.tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 0, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 0, 1, 1, 0, 0],
        [1, 0, 1, 1, 1, 1],  # the action block sees the prompt and every action slot
        [1, 0, 1, 1, 1, 1],
    ]


def test_rl_head_equals_the_last_256_ids_of_the_full_lm_head(make_policy, make_obs):
    policy = make_policy()
    px, tokens, mask = _inputs(policy, make_obs(batch=2))
    with torch.no_grad():
        logits, hidden = policy.action_outputs(px, tokens, mask)
        full = policy.language_model.lm_head(hidden).float()
    cfg = policy.cfg
    assert logits.shape == (2, 56, 256) and hidden.shape == (2, 56, cfg.llm_width)
    start, end = cfg.action_token_start, cfg.text_vocab_size
    assert (start, end) == (320, 576)
    torch.testing.assert_close(logits, full[..., start:end], atol=1e-6, rtol=0)
    # RLinf masks every other id to -inf: the same distribution
    masked = full.clone()
    masked[..., :start] = -torch.inf
    masked[..., end:] = -torch.inf
    torch.testing.assert_close(torch.log_softmax(masked, -1)[..., start:end], torch.log_softmax(logits, -1),
                               atol=1e-5, rtol=0)


def test_matches_a_plain_transformers_forward_with_the_same_mask(make_policy, make_obs):
    """Parity with transformers' own LlamaModel forward given the equivalent 4-D mask and positions."""
    policy = make_policy()
    px, tokens, mask = _inputs(policy, make_obs(batch=2))
    with torch.no_grad():
        logits, _ = policy.action_outputs(px, tokens, mask)
        seq, valid = policy.embed_sequence(px, tokens, mask)
        pos = (valid.long().cumsum(1) - 1).clamp(min=0)
        allowed = attention_mask_2d(valid, 56, "bidirectional")
        additive = torch.where(allowed[:, None], 0.0, torch.finfo(seq.dtype).min)
        out = policy.language_model(inputs_embeds=seq, attention_mask=additive, position_ids=pos).logits
    s = seq.shape[1]
    ref = out[:, s - 57: s - 1, policy.cfg.action_token_start: policy.cfg.text_vocab_size]
    torch.testing.assert_close(logits, ref.float(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["bidirectional", "action_bidirectional"])
def test_prompt_padding_does_not_change_outputs(make_policy, make_obs, mode):
    short = make_policy(attention=mode, max_prompt_len=112)
    long = make_policy(attention=mode, max_prompt_len=160)
    long.load_state_dict(short.state_dict())
    obs = make_obs(batch=3)
    with torch.no_grad():
        a, ha = short.action_outputs(*_inputs(short, obs))
        b, hb = long.action_outputs(*_inputs(long, obs))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ha, hb, atol=1e-5, rtol=1e-5)


def test_batch_rows_are_independent(make_policy, make_obs):
    policy = make_policy()
    obs = make_obs(batch=3)
    with torch.no_grad():
        full, _ = policy.action_outputs(*_inputs(policy, obs))
        one, _ = policy.action_outputs(*_inputs(policy, {k: v[1:2] for k, v in obs.items()}))
    torch.testing.assert_close(full[1:2], one, atol=1e-5, rtol=1e-5)


def test_attention_mode_matters(make_policy, make_obs):
    a = make_policy(attention="bidirectional")
    b = make_policy(attention="action_bidirectional")
    obs = make_obs(batch=2)
    with torch.no_grad():
        la, _ = a.action_outputs(*_inputs(a, obs))
        lb, _ = b.action_outputs(*_inputs(b, obs))
    assert (la - lb).abs().max() > 1e-4


def test_vision_uses_the_second_to_last_blocks_only(make_policy, make_obs):
    policy = make_policy()
    px, _, _ = _inputs(policy, make_obs(batch=2))
    vb = policy.vision_backbone
    with torch.no_grad():
        before = vb(px)
        for p in [*vb.featurizer.encoder.layer[-1].parameters(), *vb.featurizer.layernorm.parameters(),
                  *vb.fused_featurizer.encoder.layers[-1].parameters(),
                  *vb.fused_featurizer.post_layernorm.parameters(), *vb.fused_featurizer.head.parameters()]:
            p.add_(1.0)
        after = vb(px)
        assert torch.equal(before, after)
        vb.featurizer.encoder.layer[-2].mlp.fc2.bias.add_(1.0)
        assert not torch.equal(before, vb(px))
    cfg = policy.cfg
    assert before.shape == (2, cfg.num_patches, cfg.dino_width + cfg.siglip_width)


def test_dinov2_without_registers(make_policy, make_obs):
    policy = make_policy(dino_registers=0)
    with torch.no_grad():
        logits, _ = policy.action_outputs(*_inputs(policy, make_obs(batch=1)))
    assert logits.shape == (1, 56, 256) and torch.isfinite(logits).all()
    assert type(policy.vision_backbone.featurizer).__name__ == "Dinov2Model"


def test_action_placeholders_are_zero_embeddings(make_policy, make_obs):
    policy = make_policy()
    px, tokens, mask = _inputs(policy, make_obs(batch=2))
    with torch.no_grad():
        seq, valid = policy.embed_sequence(px, tokens, mask)
    cfg = policy.cfg
    assert seq.shape[1] == cfg.num_patches + cfg.max_prompt_len + 56
    assert torch.equal(seq[:, -56:], torch.zeros_like(seq[:, -56:]))
    assert bool(valid[:, -56:].all()) and bool(valid[:, 1: 1 + cfg.num_patches].all())
    emb = policy.language_model.get_input_embeddings()
    assert torch.equal(seq[:, 0], emb(tokens[:, 0]))  # BOS first, then the patches


def test_bf16_forward_is_finite(make_policy, make_obs):
    policy = make_policy().to(torch.bfloat16)
    with torch.no_grad():
        logits, hidden = policy.action_outputs(*_inputs(policy, make_obs(batch=2)))
    assert logits.dtype == torch.float32 and hidden.dtype == torch.bfloat16
    assert torch.isfinite(logits).all()
