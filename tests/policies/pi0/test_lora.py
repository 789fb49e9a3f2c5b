"""LoRA wrapper: exact identity at init, the y = xW^T + b + s (xA^T)B^T formula, exact merge."""

from __future__ import annotations

import torch
from torch import nn

from vlarl_cli.policies.lora import LoRALinear, apply_lora, lora_parameters, merge_lora


def test_fresh_lora_is_the_base_layer_and_formula_holds():
    torch.manual_seed(0)
    base = nn.Linear(6, 4)
    lora = LoRALinear.from_linear(base, rank=2, alpha=4.0)
    x = torch.randn(3, 6)
    assert torch.equal(lora(x), base(x))  # B = 0
    assert lora.weight is base.weight and not lora.weight.requires_grad
    with torch.no_grad():
        lora.lora_B.normal_()
    expected = x @ base.weight.T + base.bias + 2.0 * (x @ lora.lora_A.T) @ lora.lora_B.T
    assert torch.allclose(lora(x), expected, atol=1e-6)


def test_apply_and_merge():
    torch.manual_seed(0)
    model = nn.Sequential()
    model.block = nn.Module()
    model.block.q_proj = nn.Linear(5, 5, bias=False)
    model.block.other = nn.Linear(5, 5)
    assert apply_lora(model, rank=3) == 1
    assert isinstance(model.block.q_proj, LoRALinear) and type(model.block.other) is nn.Linear
    assert len(lora_parameters(model)) == 2
    with torch.no_grad():
        model.block.q_proj.lora_B.normal_()
    x = torch.randn(2, 5)
    before = model.block.q_proj(x)
    assert merge_lora(model) == 1
    assert type(model.block.q_proj) is nn.Linear
    assert torch.allclose(model.block.q_proj(x), before, atol=1e-6)
    assert set(model.state_dict()) == {"block.q_proj.weight", "block.other.weight", "block.other.bias"}
