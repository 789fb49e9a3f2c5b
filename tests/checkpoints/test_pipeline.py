"""The shared load steps of checkpoints/pipeline.py on hand-made tensors: where each file tensor goes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from vlarl_cli.checkpoints import pipeline
from vlarl_cli.checkpoints.detect import weights_table
from vlarl_cli.errors import CheckpointError


def _table(tmp_path: Path, tensors: dict[str, torch.Tensor]) -> pipeline.TensorTable:
    save_file(tensors, tmp_path / "model.safetensors")
    return weights_table(tmp_path)


def test_plan_sorts_every_file_tensor(tmp_path: Path) -> None:
    header = _table(tmp_path, {
        "up.a": torch.full((2, 3), 1.0), "up.b": torch.zeros(4), "up.unused": torch.zeros(1),
        "up.extra": torch.zeros(1), "up.value_head.w": torch.zeros(5), "up.noise_head.w": torch.zeros(1),
        "up.head": torch.full((3,), 7.0)})
    params = {"a": torch.zeros(2, 3), "b": torch.zeros(5), "value_head.w": torch.zeros(6), "embed": torch.zeros(3)}
    report = pipeline.LoadReport("up")
    rename = {"up.a": "a", "up.b": "b", "up.value_head.w": "value_head.w", "up.noise_head.w": "noise_head.w"}.get
    plan = pipeline.plan_copies(header, params, rename, report, ignore=lambda k: k in ("up.unused", "up.head"),
                                optional=("value_head.", "noise_head."), skip_misfit_optional=True)
    pipeline.fill_tied(plan, header, params, report, "embed", ["up.head"])
    assert sorted(plan) == [("up.a", "a"), ("up.head", "embed")]
    assert sorted(report.skipped) == ["up.head", "up.noise_head.w", "up.unused", "up.value_head.w"]
    assert report.unexpected == ["up.extra"] and report.mismatched == ["up.b [4] vs model [5]"]
    pipeline.stream(plan, header, params, report)
    assert report.loaded == 2 and torch.equal(params["a"], torch.ones(2, 3)) and torch.equal(params["embed"],
                                                                                              torch.full((3,), 7.0))
    with pytest.raises(CheckpointError, match=r"unexpected 1: up\.extra; wrong shape 1: up\.b"):
        report.raise_if_incomplete(tmp_path, "test model", "fix it")


def test_optional_head_of_another_shape_is_a_mismatch_unless_skipped(tmp_path: Path) -> None:
    header = _table(tmp_path, {"value_head.w": torch.zeros(5)})
    params = {"value_head.w": torch.zeros(6)}
    report = pipeline.LoadReport("vlarl")
    assert pipeline.plan_copies(header, params, str, report, optional=("value_head.",)) == []  # nothing ignored
    assert report.mismatched == ["value_head.w [5] vs model [6]"] and not report.skipped


def test_plan_absent_splits_fresh_from_holes_and_settle_absent_builds_and_zeroes() -> None:
    params = {"w": torch.ones(2), "value_head.w": torch.ones(2), "x.lora_A": torch.ones(2), "v": torch.ones(2)}
    report = pipeline.LoadReport("vlarl")
    pipeline.plan_absent(params, ["v"], report, ("value_head.",))  # "v" is planned: neither fresh nor a hole
    assert report.initialized == ["value_head.w", "x.lora_A"] and report.missing == ["w"]
    assert all(torch.equal(t, torch.ones(2)) for t in params.values())  # planning touches no tensor
    built: list[list[str]] = []
    pipeline.settle_absent(nn.Linear(1, 1), params, report, lambda _p, fresh: built.append(fresh))
    assert built == [["value_head.w", "x.lora_A"]]
    assert torch.equal(params["w"], torch.zeros(2)) and torch.equal(params["value_head.w"], torch.ones(2))


def test_reset_buffers_recomputes_position_ids_and_refuses_unknown() -> None:
    class Emb(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("position_ids", torch.full((1, 4), -1), persistent=False)

    model = nn.Sequential(Emb())
    pipeline.reset_buffers(model)
    assert torch.equal(model[0].position_ids, torch.arange(4).expand(1, -1))
    model[0].register_buffer("scratch", torch.zeros(1), persistent=False)
    with pytest.raises(TypeError, match="scratch"):
        pipeline.reset_buffers(model)
