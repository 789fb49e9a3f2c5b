"""benchmarks/learning_run.py's ``--obs-mode image``: what it hands every stage (no simulator runs here; the
stages themselves run in the benchmark smoke test and in docs/learning/image_mode.md's run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from vlarl_cli.config.loading import load_config

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "learning_run.py"


@pytest.fixture
def lr(monkeypatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as when it runs as a script: its folder's _bench helper
    spec = importlib.util.spec_from_file_location("learning_run", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(lr: ModuleType, args, out: Path, monkeypatch) -> list[list[str]]:
    ran: list[list[str]] = []
    monkeypatch.setattr(lr, "_run", lambda cmd, log: ran.append(cmd))
    lr.stage_sft(out, args, out / "init_model")
    with pytest.raises(FileNotFoundError):  # no summary.json: nothing was evaluated
        lr.stage_eval(out, args, out / "ckpt", "eval_sft")
    return ran


@pytest.mark.parametrize("argv", [["--short"], ["--resolution", "224", "--render-quality", "fast"]])
def test_image_mode_reaches_every_stage(lr, argv, tmp_path, monkeypatch):
    args = lr.parse(["--out", str(tmp_path), "--obs-mode", "image", *argv])
    rl = load_config("libero_tiny_ppo", lr.rl_overrides(tmp_path, args, tmp_path / "ckpt")).config
    assert rl.env.train.resolution == args.resolution and rl.env.train.render_quality == args.render_quality
    assert rl.samples_per_iteration() % rl.actor.global_batch_size == 0
    sft_cmd, eval_cmd = _commands(lr, args, tmp_path, monkeypatch)
    sft = load_config("sft_learning_run", [o for o in sft_cmd if "=" in o and not o.startswith("-")]).config
    assert sft.env.train.resolution == sft.env.eval.resolution == args.resolution
    assert sft.env.train.render_quality == args.render_quality
    assert eval_cmd[eval_cmd.index("--resolution") + 1] == str(args.resolution)
    assert eval_cmd[eval_cmd.index("--render-quality") + 1] == args.render_quality


def test_state_mode_renders_nothing(lr, tmp_path, monkeypatch, capsys):
    args = lr.parse(["--out", str(tmp_path)])
    sft_cmd, eval_cmd = _commands(lr, args, tmp_path, monkeypatch)
    assert "--render-quality" not in eval_cmd and not any("render_quality" in c for c in sft_cmd)
    assert not any("render_quality" in o for o in lr.rl_overrides(tmp_path, args, tmp_path / "ckpt"))
    with pytest.raises(SystemExit) as exit_:
        lr.parse(["--out", str(tmp_path), "--render-quality", "fast"])
    assert exit_.value.code == 2 and "--obs-mode image" in capsys.readouterr().err


def test_image_policy_reads_both_cameras(lr, tmp_path):
    """The image mode's initial policy: main + wrist cameras and the proprio, 16 tokens per camera."""
    from vlarl_cli.policies.pi0.checkpoint import load_policy

    policy = load_policy(lr.stage_init_model(tmp_path, 0, lr.MODEL_IMAGE))
    assert policy.cameras == ("main", "wrist") and policy.obs_mode == "rgb"
    assert policy.cfg.tokens_per_image == 16 and policy.cfg.state_env_dim == 8


def test_resume_refuses_the_other_mode(lr, tmp_path):
    """A run folder started in one --obs-mode is not silently continued in the other."""
    lr.stage_init_model(tmp_path, 0, lr.MODEL)
    with pytest.raises(SystemExit, match="obs_mode state, not rgb"):
        lr.stage_init_model(tmp_path, 0, lr.MODEL_IMAGE)
    assert lr.stage_init_model(tmp_path, 0, lr.MODEL) == tmp_path / "init_model"


@pytest.mark.parametrize(("argv", "steps"), [([], 2000), (["--obs-mode", "image"], 8000),
                                             (["--obs-mode", "image", "--sft-steps", "3000"], 3000),
                                             (["--obs-mode", "image", "--short"], 40)])
def test_sft_steps_by_mode(lr, argv, steps, tmp_path, monkeypatch):
    """Image mode's SFT runs 8000 steps unless told (2000 left its policy at 1 / 50, image_mode.md); the SFT
    command and the checkpoint the evaluations read agree on it."""
    args = lr.parse(["--out", str(tmp_path), *argv])
    assert args.sft_steps == steps
    sft_cmd, _ = _commands(lr, args, tmp_path, monkeypatch)
    assert sft_cmd[sft_cmd.index("--steps") + 1] == str(steps)
    assert lr._sft_checkpoint(tmp_path, args.sft_steps).name == f"global_step_{steps}"
