"""training/ema.py: openpi's EMA update by hand, its decay table, the EMA folder chosen by default."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from vlarl_cli.training.ema import EMA_FOLDER, WeightEMA, choose_weights, default_decay


def test_update_is_openpis_formula_from_the_initial_weights() -> None:
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    ema = WeightEMA(model, decay=0.9)
    expected = torch.tensor([[1.0, -2.0]])  # init_train_state: ema_params = params
    for new in ([[3.0, 0.0]], [[-1.0, 4.0]], [[0.5, 0.5]]):
        with torch.no_grad():
            model.weight.copy_(torch.tensor(new))
        ema.update(model)
        expected = 0.9 * expected + 0.1 * torch.tensor(new)  # train.py: decay * old + (1 - decay) * new
    torch.testing.assert_close(ema.state_dict()["weight"], expected, rtol=0, atol=1e-7)
    with ema.applied(model):
        torch.testing.assert_close(model.weight.detach(), expected, rtol=0, atol=1e-7)
    assert torch.equal(model.weight.detach(), torch.tensor([[0.5, 0.5]]))  # raw weights back


def test_frozen_parameters_are_not_averaged() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    model[0].requires_grad_(False)
    assert WeightEMA(model, 0.99).names == ["1.weight", "1.bias"]


@pytest.mark.parametrize(("model_type", "config_name", "trainable", "decay"), [
    ("pi0", None, "full", 0.99), ("pi05", None, "full", 0.999), ("openpi", "pi05_libero", "head", 0.999),
    ("openpi", "pi0_libero", "full", 0.99), ("pi0", None, "lora", None), ("gr00t", None, "full", None),
    ("openvla_oft", None, "full", None)])
def test_default_decay_is_openpis(model_type: str, config_name: str | None, trainable: str,
                                  decay: float | None) -> None:
    assert default_decay(model_type, config_name, trainable) == decay


def test_the_ema_folder_is_chosen_and_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    assert choose_weights(str(tmp_path), said.append) == str(tmp_path) and said == []
    (tmp_path / EMA_FOLDER).mkdir()
    (tmp_path / EMA_FOLDER / "config.yaml").write_text("{}")
    assert choose_weights(str(tmp_path), said.append) == str(tmp_path / EMA_FOLDER)
    assert "EMA" in said[-1] and "VLARL_EMA=0" in said[-1]
    monkeypatch.setenv("VLARL_EMA", "0")
    assert choose_weights(str(tmp_path), said.append) == str(tmp_path)
    assert "raw weights" in said[-1]
