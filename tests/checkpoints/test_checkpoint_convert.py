"""`vlarl convert` dispatch, LoRA merge, dtype cast, pickle gate and self-check, on a fake family."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import fake_family
import pytest
import torch
from safetensors.torch import load_file

from vlarl_cli.checkpoints import convert as convert_mod
from vlarl_cli.checkpoints import detect
from vlarl_cli.checkpoints.convert import convert, parse_dtype, probe_observation
from vlarl_cli.errors import CheckpointError


@pytest.fixture
def fakefam(monkeypatch):
    """Register tests/checkpoints/fake_family.py as vlarl_cli.policies.fakefam.checkpoint."""
    monkeypatch.setitem(sys.modules, "vlarl_cli.policies.fakefam.checkpoint", fake_family)
    monkeypatch.setitem(detect.FAMILY_MODEL_TYPES, "fakefam", ("fakefam",))
    return fake_family


def _policy(seed: int = 0, **settings) -> fake_family.FakePolicy:
    torch.manual_seed(seed)
    p = fake_family.FakePolicy(fake_family.FakeSettings(**settings))
    with torch.no_grad():  # non-zero LoRA B so that merging actually changes the base weight
        for m in p.modules():
            if hasattr(m, "lora_B"):
                m.lora_B.normal_()
    return p


def _save(policy, path: Path, fmt: str = "vlarl") -> Path:
    path.mkdir(parents=True)
    fake_family.save_policy(policy, path, format=fmt)
    return path


def test_round_trip_is_exact(fakefam, tmp_path):
    src = _save(_policy(), tmp_path / "src")
    rep = convert(src, tmp_path / "up", "upstream")
    assert rep.family == "fakefam" and (rep.src_format, rep.dst_format) == ("vlarl", "upstream")
    assert rep.max_abs_diff == 0.0 and rep.max_abs_diff_values == 0.0
    up = load_file(tmp_path / "up" / "weights.safetensors")
    assert set(up) == {"net.encoder.weight", "net.encoder.bias", "net.action_head.weight",
                       "net.action_head.bias", "net.critic.weight", "net.critic.bias"}
    back = convert(tmp_path / "up", tmp_path / "back", "vlarl")
    assert back.src_format == "upstream"
    a, b = load_file(src / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k])  # atol = 0
    assert rep.num_parameters == 14 * 8 + 8 + 8 * 21 + 21 + 8 + 1


def test_lora_merge_matches_hand_computed_weight(fakefam, tmp_path):
    pol = _policy(is_lora=True, lora_rank=2)
    src = _save(pol, tmp_path / "src")
    rep = convert(src, tmp_path / "merged", "upstream")
    assert rep.lora_merged == 2
    assert 0.0 <= rep.max_abs_diff <= 1e-4
    out = load_file(tmp_path / "merged" / "weights.safetensors")
    assert not [k for k in out if "lora" in k]
    enc = pol.enc
    expected = enc.weight + (enc.lora_B @ enc.lora_A) * enc.scaling  # W + B A * alpha / r
    torch.testing.assert_close(out["net.encoder.weight"], expected.detach(), rtol=0, atol=1e-6)
    assert json.loads((tmp_path / "merged" / "fake_config.json").read_text())["is_lora"] is False

    kept = convert(src, tmp_path / "kept", "vlarl", merge_lora=False)
    assert kept.lora_merged == 0 and kept.max_abs_diff == 0.0
    assert any("lora_A" in k for k in load_file(tmp_path / "kept" / "model.safetensors"))


def test_dtype_cast_reports_difference(fakefam, tmp_path):
    src = _save(_policy(), tmp_path / "src")
    rep = convert(src, tmp_path / "bf16", "upstream", dtype="bf16")
    assert rep.dtype == "bfloat16"
    assert {t.dtype for t in load_file(tmp_path / "bf16" / "weights.safetensors").values()} == {torch.bfloat16}
    assert rep.max_abs_diff is not None and 0.0 < rep.max_abs_diff < 0.1
    with pytest.raises(CheckpointError, match="Unknown dtype"):
        parse_dtype("bf61")


def test_failed_check_leaves_no_destination(fakefam, tmp_path, monkeypatch):
    src = _save(_policy(), tmp_path / "src")
    real_save = fake_family.save_policy

    def buggy_save(policy, path, *, format="vlarl", dtype=None):
        with torch.no_grad():
            policy.head.bias.add_(0.5)  # a wrong key map would do something like this
        real_save(policy, path, format=format, dtype=dtype)

    monkeypatch.setattr(fake_family, "save_policy", buggy_save)
    with pytest.raises(CheckpointError, match="Conversion check failed"):
        convert(src, tmp_path / "bad", "upstream")
    assert not (tmp_path / "bad").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no temp leftovers either


def test_errors_name_the_problem(fakefam, tmp_path):
    src = _save(_policy(), tmp_path / "src")
    with pytest.raises(CheckpointError, match='Did you mean "upstream"'):
        convert(src, tmp_path / "x", "upstrem")
    (tmp_path / "exists").mkdir()
    with pytest.raises(CheckpointError, match="already exists"):
        convert(src, tmp_path / "exists", "upstream")
    rep = convert(src, tmp_path / "exists", "upstream", overwrite=True)
    assert rep.max_abs_diff == 0.0 and (tmp_path / "exists" / "weights.safetensors").is_file()
    with pytest.raises(CheckpointError, match="does not exist"):
        convert(tmp_path / "nope", tmp_path / "y", "vlarl")
    with pytest.raises(CheckpointError, match="inside"):
        convert(src, src / "sub", "vlarl")
    (tmp_path / "unknown").mkdir()
    (tmp_path / "unknown" / "notes.txt").write_text("hi")
    with pytest.raises(CheckpointError, match="Cannot tell which model family"):
        convert(tmp_path / "unknown", tmp_path / "z", "vlarl")


def test_family_without_module_is_not_supported_yet(fakefam, tmp_path, monkeypatch):
    real = detect.family_checkpoint_module
    monkeypatch.setattr(convert_mod, "family_checkpoint_module",
                        lambda f: None if f == "openvla_oft" else real(f))
    oft = tmp_path / "oft"
    oft.mkdir()
    (oft / "config.json").write_text(json.dumps({"model_type": "openvla"}))
    (oft / "dataset_statistics.json").write_text("{}")
    with pytest.raises(CheckpointError) as err:
        convert(oft, tmp_path / "o", "vlarl")
    assert "openvla_oft checkpoints (openvla_hf) is not supported yet" in err.value.problem
    assert "fakefam: vlarl, upstream" in (err.value.fix or "")


def test_pickle_source_needs_flag(fakefam, tmp_path):
    pol = _policy()
    src = tmp_path / "src"
    src.mkdir()
    (src / "vlarl_config.json").write_text(json.dumps({"family": "fakefam", "format_version": 1,
                                                       "model": {"hidden": 8}}))
    torch.save(pol.state_dict(), src / "model.pt")
    with pytest.raises(CheckpointError, match="pickle-based weights"):
        convert(src, tmp_path / "out", "upstream")
    assert not (tmp_path / "out").exists()
    rep = convert(src, tmp_path / "out", "upstream", allow_pickle=True)
    assert rep.max_abs_diff == 0.0
    out = load_file(tmp_path / "out" / "weights.safetensors")
    assert torch.equal(out["net.encoder.weight"], pol.enc.weight.detach())


def test_probe_is_deterministic_and_seeded():
    a, b = probe_observation(seed=0), probe_observation(seed=0)
    assert torch.equal(a["main_images"], b["main_images"]) and a["main_images"].shape == (2, 224, 224, 3)
    assert a["main_images"].dtype == torch.uint8 and a["states"].shape == (2, 8)
    assert not torch.equal(a["states"], probe_observation(seed=1)["states"])
    assert len(probe_observation(batch_size=3)["task_descriptions"]) == 3


def test_cli_convert(fakefam, tmp_path):
    import typer
    from typer.testing import CliRunner

    from vlarl_cli.cli import convert as cli_convert

    src = _save(_policy(), tmp_path / "src")
    app = typer.Typer()
    app.command("convert")(cli_convert.command)
    app.command("other")(lambda: None)
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out"), "--to", "upstream",
                                   "--dtype", "fp32"])
    assert res.exit_code == 0, res.output
    assert "max |diff| actions 0" in res.output and "fakefam" in res.output
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out"), "--to", "upstream"])
    assert isinstance(res.exception, CheckpointError)  # main.py turns this into exit code 2


@pytest.mark.parametrize(("version", "model_type", "fmt"), [("n1.5", "gr00t", "gr00t_n15"),
                                                          ("n1.6", "gr00t_n1d6", "gr00t_n16")])
def test_gr00t_round_trip_through_upstream_layout(tmp_path, version, model_type, fmt):
    """Real family module: vlarl -> upstream GR00T folder -> vlarl is exact, and the probe agrees."""
    ck = pytest.importorskip("vlarl_cli.policies.gr00t.checkpoint")
    from vlarl_cli.policies.gr00t.config import ModelSettings, preset
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    torch.manual_seed(0)
    settings = ModelSettings(model_type=model_type, preset="tiny")
    cfg = preset("tiny", version)
    policy = Gr00tPolicy(cfg, settings, default_modality(settings.effective_embodiment_tag, cfg))
    src = tmp_path / "src"
    src.mkdir()
    ck.save_policy(policy, src, format="vlarl")

    up = convert(src, tmp_path / "up", fmt)
    assert (up.family, up.src_format, up.dst_format) == ("gr00t", "vlarl", fmt)
    assert up.max_abs_diff == 0.0
    assert detect.detect_checkpoint(tmp_path / "up").format == fmt
    back = convert(tmp_path / "up", tmp_path / "back", "vlarl")
    assert back.max_abs_diff == 0.0
    a, b = load_file(src / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(CheckpointError, match="not a gr00t checkpoint format"):
        convert(src, tmp_path / "x", "openpi")


@pytest.mark.parametrize(("model_type", "fmt"), [("pi05", "openpi"), ("pi0", "hf_pi0"), ("pi05", "lerobot")])
def test_pi0_round_trip_and_detection_agree(tmp_path, model_type, fmt):
    """Real pi0 family: vlarl -> upstream -> vlarl exact; our cheap detection table agrees with the
    family module's own detect_format on the folder it wrote."""
    ck = pytest.importorskip("vlarl_cli.policies.pi0.checkpoint")
    from vlarl_cli.policies.pi0 import ModelSettings, build_policy

    torch.manual_seed(0)
    src = tmp_path / "src"
    ck.save_policy(build_policy(ModelSettings(model_type=model_type, preset="tiny"), "cpu"), src, format="vlarl")
    up = convert(src, tmp_path / "up", fmt)
    assert (up.family, up.dst_format, up.max_abs_diff, up.max_abs_diff_values) == ("pi0", fmt, 0.0, 0.0)
    table = detect.detect_checkpoint(tmp_path / "up")  # heuristics only
    assert (table.family, table.format, table.variant) == ("pi0", ck.detect_format(tmp_path / "up"), model_type)
    back = convert(tmp_path / "up", tmp_path / "back", "vlarl")
    assert back.max_abs_diff == 0.0
    a, b = load_file(src / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_pi0_lora_merge_into_vlarl_layout(tmp_path):
    """A LoRA-trained pi0.5 exported as a plain vlarl checkpoint: no adapter keys, is_lora false, same
    actions up to float rounding of the merge."""
    ck = pytest.importorskip("vlarl_cli.policies.pi0.checkpoint")
    from vlarl_cli.policies.pi0 import ModelSettings, build_policy

    torch.manual_seed(0)
    policy = build_policy(ModelSettings(model_type="pi05", preset="tiny", is_lora=True, lora_rank=4), "cpu")
    with torch.no_grad():
        for m in policy.modules():
            if hasattr(m, "lora_B"):
                m.lora_B.normal_(std=0.1)  # trained adapters are non-zero
    src = tmp_path / "src"
    ck.save_policy(policy, src, format="vlarl")
    rep = convert(src, tmp_path / "merged", "vlarl")
    assert rep.lora_merged > 0 and rep.max_abs_diff is not None and rep.max_abs_diff <= 1e-4
    assert not [k for k in load_file(tmp_path / "merged" / "model.safetensors") if "lora" in k]
    saved = json.loads((tmp_path / "merged" / "vlarl_config.json").read_text())
    assert saved["model"]["is_lora"] is False


def test_cli_pickle_gate_end_to_end(tmp_path):
    """`vlarl convert` through the real entry point: a pickle-only source is refused with exit code 2
    and one paragraph; with --allow-pickle it converts and prints the probe difference."""
    import subprocess

    ck = pytest.importorskip("vlarl_cli.policies.pi0.checkpoint")
    from vlarl_cli.policies.pi0 import ModelSettings, build_policy

    torch.manual_seed(0)
    src = tmp_path / "src"
    ck.save_policy(build_policy(ModelSettings(model_type="pi0", preset="tiny"), "cpu"), src, format="vlarl")
    torch.save(load_file(src / "model.safetensors"), src / "model.pt")
    (src / "model.safetensors").unlink()
    cmd = [sys.executable, "-m", "vlarl_cli.cli.main", "convert", str(src), str(tmp_path / "out"), "--to", "openpi"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "pickle-based weights (model.pt)" in res.stderr and "--allow-pickle" in res.stderr
    assert not (tmp_path / "out").exists()
    res = subprocess.run([*cmd, "--allow-pickle"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "max |diff| actions 0, values 0" in res.stdout
    assert ck.detect_format(tmp_path / "out") == "openpi"
