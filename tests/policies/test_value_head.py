"""The generic MLP critic: RLinf's parameter names and layout, both inits, hand-computed values."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.value_head import MLPCritic, build_mlp_critic


def test_parameter_names_and_shapes_are_rlinfs() -> None:
    # rlinf 0.3.0 modules/value_head.py: Sequential "mlp" of Linear/act pairs, last Linear(w, 1, bias=True)
    head = build_mlp_critic(2048, (1024, 512, 256), "relu")
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    assert shapes == {"mlp.0.weight": (1024, 2048), "mlp.0.bias": (1024,), "mlp.2.weight": (512, 1024),
                      "mlp.2.bias": (512,), "mlp.4.weight": (256, 512), "mlp.4.bias": (256,),
                      "mlp.6.weight": (1, 256), "mlp.6.bias": (1,)}
    assert [type(m) for m in head.mlp][1::2] == [nn.ReLU, nn.ReLU, nn.ReLU]
    assert "mlp.6.bias" not in build_mlp_critic(8, (4,), bias_last=False).state_dict()
    assert "mlp.2.bias" not in build_mlp_critic(8, (4,), bias_last=False).state_dict()


def test_hand_computed_value() -> None:
    head = build_mlp_critic(2, (2,), "relu")
    with torch.no_grad():
        head.mlp[0].weight.copy_(torch.tensor([[1.0, -1.0], [2.0, 0.5]]))
        head.mlp[0].bias.copy_(torch.tensor([0.0, -1.0]))
        head.mlp[2].weight.copy_(torch.tensor([[3.0, -2.0]]))
        head.mlp[2].bias.copy_(torch.tensor([0.25]))
    x = torch.tensor([[1.0, 2.0], [3.0, 1.0]])
    # row 0: hidden relu([-1, 2 + 1 - 1]) = [0, 2] -> 3*0 - 2*2 + 0.25 = -3.75
    # row 1: hidden relu([2, 6 + 0.5 - 1]) = [2, 5.5] -> 6 - 11 + 0.25 = -4.75
    out = head(x)
    assert out.dtype == torch.float32 and out.shape == (2,)
    torch.testing.assert_close(out, torch.tensor([-3.75, -4.75]), rtol=0, atol=0)


def test_rlinf_init_statistics() -> None:
    torch.manual_seed(0)
    head = build_mlp_critic(1024, (512, 256, 128), "relu", init="rlinf")
    w0 = head.mlp[0].weight
    # kaiming_normal fan_out for ReLU: std = sqrt(2 / fan_out) = sqrt(2 / 512)
    assert abs(w0.std().item() - (2 / 512) ** 0.5) < 0.05 * (2 / 512) ** 0.5
    assert abs(head.mlp[6].weight.std().item() - 0.02) < 0.004
    assert all(float(m.bias.detach().abs().max()) == 0.0 for m in head.mlp if isinstance(m, nn.Linear))
    values = head(torch.randn(64, 1024))
    assert 0 < float(values.abs().max()) < 5.0


def test_zero_last_starts_at_zero_and_learns() -> None:
    torch.manual_seed(0)
    head = build_mlp_critic(16, (8,), "gelu", init="zero_last")
    x = torch.randn(32, 16)
    assert float(head(x).abs().max()) == 0.0
    target = x[:, 0]
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    first = float(((head(x) - target) ** 2).mean())
    for _ in range(200):
        opt.zero_grad()
        loss = ((head(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
    assert float(loss) < 0.2 * first


def test_bf16_features_give_float32_values() -> None:
    head = build_mlp_critic(4, (3,)).to(torch.bfloat16)
    assert head(torch.ones(2, 4, dtype=torch.bfloat16)).dtype == torch.float32


@pytest.mark.parametrize("kwargs, match", [({"activation": "swish"}, "activation"),
                                           ({"init": "xavier"}, "init"),
                                           ({"hidden_sizes": (0,)}, "positive")])
def test_bad_settings_are_refused(kwargs: dict, match: str) -> None:
    args = {"in_dim": 4, "hidden_sizes": (3,), **kwargs}
    with pytest.raises(ConfigError, match=match):
        MLPCritic(**args)


def test_wrong_feature_width_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\[B, 4\]"):
        build_mlp_critic(4, (3,))(torch.ones(2, 5))
