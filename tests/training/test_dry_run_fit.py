"""``--dry-run``'s device fit: which micro-batch a device holds, and the refusal when none can."""

from __future__ import annotations

import pytest

from vlarl_cli.config.loading import load_config
from vlarl_cli.training.dry_run import (
    FIT_MARGIN,
    build_meta_policy,
    plan_device_fit,
    refusal,
)

RECIPE = ("libero_10_ppo_openvlaoft", ["actor.model.model_path=null", "actor.model.preset=tiny"])


@pytest.fixture(scope="module")
def built() -> tuple:
    config = load_config(*RECIPE).config
    return config, build_meta_policy(config)


def test_the_choice_is_the_largest_halving_whose_plan_fits_with_the_margin(built: tuple) -> None:
    config, meta = built
    plans = plan_device_fit(config, 1.0, meta).planned
    assert list(plans) == [32, 16, 8, 4, 2, 1]
    totals = {mb: est.device_total for mb, est in plans.items()}
    assert totals[32] > totals[1]  # the activations grow with the micro-batch
    for total in totals.values():
        fit = plan_device_fit(config, total * FIT_MARGIN, meta)
        assert fit.micro_batch == max(m for m, t in totals.items() if t <= total)
        assert (" fits " in fit.reason()) == (fit.micro_batch == 32)


def test_without_the_margin_only_micro_batch_1_and_below_the_fixed_part_none(built: tuple) -> None:
    config, meta = built
    fixed = plan_device_fit(config, 1.0, meta).fixed.device_total
    tight = plan_device_fit(config, plan_device_fit(config, 1.0, meta).planned[1].device_total, meta)
    assert tight.micro_batch == 1 and "only without the margin" in tight.reason()
    none = plan_device_fit(config, fixed * 0.99, meta)
    assert none.micro_batch is None and "no micro-batch fits" in none.reason()
    text = refusal(config, none)
    assert text.startswith("openvla_oft cannot train on one device of") and "halving the micro-batch" in text
    for fix in ("FSDP over 2 such devices", "cpu_offload=true", "is_lora=true", "smaller recipe"):
        assert fix in text, fix


def test_the_dry_run_prints_the_fit(capsys: pytest.CaptureFixture[str]) -> None:
    from vlarl_cli.training.dry_run import dry_run

    dry_run(load_config(*RECIPE).config, 1)
    out = " ".join(capsys.readouterr().out.split())
    assert "does not depend on the micro-batch (weights, gradients, AdamW moments" in out
    assert "Largest micro-batch (the configured 32 or a halving)" in out and "H200 (139.8 GiB): 32" in out


def _a_gpu_of(monkeypatch: pytest.MonkeyPatch, total: float) -> None:
    """``torch.cuda.get_device_properties`` of a GPU with ``total`` bytes (none is needed to plan for one)."""
    import types

    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(total_memory=total))


def test_a_launch_on_a_gpu_too_small_for_the_fixed_part_is_refused_before_building(
        built: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from vlarl_cli.errors import ConfigError
    from vlarl_cli.training.dry_run import check_device_fits

    config, meta = built
    fit = plan_device_fit(config, 1.0, meta, world_size=2)
    _a_gpu_of(monkeypatch, fit.fixed.device_total * 0.9)
    with pytest.raises(ConfigError, match=r"cannot train on 2 devices of .* FSDP over (4|8|16|32|64) such devices"):
        check_device_fits(config, 2, torch.device("cuda", 0))


def test_a_launch_whose_micro_batch_alone_is_too_big_is_warned_with_the_one_that_fits(
        built: tuple, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from vlarl_cli.training.dry_run import check_device_fits

    config, meta = built
    _a_gpu_of(monkeypatch, plan_device_fit(config, 1.0, meta).planned[16].device_total * FIT_MARGIN)
    check_device_fits(config, 1, torch.device("cuda", 0))
    err = " ".join(capsys.readouterr().err.split())
    assert "micro-batch 16 does" in err and "actor.micro_batch_size=16 fits" in err


def test_on_the_cpu_nothing_is_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    from vlarl_cli.training import dry_run

    def no_plan(*args: object) -> None:
        raise AssertionError("planned on the CPU")

    monkeypatch.setattr(dry_run, "plan_device_fit", no_plan)
    dry_run.check_device_fits(load_config(*RECIPE).config, 1, "cpu")
