"""User errors of `vlarl eval` / `vlarl video` end in one paragraph and exit code 2 (no simulator)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli


def test_eval_unknown_suite(tmp_path: Path) -> None:
    run = run_cli(["eval", "--suite", "libero_spatail", "--config", "libero_tiny_ppo"], cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and 'Did you mean "libero_spatial"' in run.stderr
    assert "Traceback" not in run.stderr


def test_video_rejects_a_foreign_log(tmp_path: Path) -> None:
    (tmp_path / "episodes.jsonl").write_text('{"suite":"libero_10","task":0}\n')
    run = run_cli(["video", str(tmp_path / "episodes.jsonl"), "--episode", "0"], cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and "not a vlarl episode log" in run.stderr


def test_eval_needs_a_policy(tmp_path: Path) -> None:
    """Nothing named and no run under runs/: the message says how to get a checkpoint."""
    run = run_cli(["eval", "--suite", "libero_10"], cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "--checkpoint" in run.stderr and "vlarl rl-train" in run.stderr


def test_eval_not_a_checkpoint(tmp_path: Path) -> None:
    run = run_cli(["eval", "--checkpoint", str(tmp_path)], cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and "not a vlarl training checkpoint" in run.stderr


def test_video_needs_a_selection(tmp_path: Path) -> None:
    from vlarl_cli.video.episodes import EpisodeLog, EpisodeRecord

    EpisodeLog(tmp_path / "episodes.jsonl").append(EpisodeRecord("libero_10", 0, 0, 0, "n", "l", True, 3, 7, 10, 2))
    run = run_cli(["video", str(tmp_path / "episodes.jsonl")], cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and "--failures" in run.stderr and "Traceback" not in run.stderr


def test_compare_cli(tmp_path: Path) -> None:
    from test_results import _folder

    a = _folder(tmp_path / "a", [i < 10 for i in range(50)], "aaa")
    b = _folder(tmp_path / "b", [i < 40 for i in range(50)], "bbb")
    run = run_cli(["eval", "--compare", str(a), str(b)], cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "+60.0%" in run.stdout and "Newcombe" in run.stdout and "yes" in run.stdout
    assert not (tmp_path / "cmp").exists()  # nothing written without --out
    run = run_cli(["eval", "--compare", str(a), str(b), "--out", str(tmp_path / "cmp")], cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    saved = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    overall = [r for r in saved["rows"] if r["level"] == "overall"]
    assert len(overall) == 1 and overall[0]["rate_a"] == 0.2 and overall[0]["rate_b"] == 0.8
    assert abs(overall[0]["difference"] - 0.6) < 1e-12 and overall[0]["significant"] is True
    assert overall[0]["ci95_low"] > 0 and saved["a"] == str(a) and saved["card_differences"] == []


def test_maniskill_eval_says_a_missing_maniskill_before_loading_the_policy(monkeypatch) -> None:
    """The ManiSkill check runs first: a missing package is said before minutes of policy loading."""
    import pytest

    from vlarl_cli.envs.maniskill import setup
    from vlarl_cli.errors import EnvError
    from vlarl_cli.training.evaluation import maniskill, source

    def must_not_load(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the policy was loaded before the ManiSkill check")

    monkeypatch.setattr(setup, "probe", lambda: "missing: python package mani-skill==3.0.1")
    monkeypatch.setattr(source, "load_policy", must_not_load)
    with pytest.raises(EnvError, match="ManiSkill3 cannot run on this machine: missing: python package mani-skill"):
        maniskill.evaluate_maniskill(None, "maniskill_pushcube_ppo_mlp", [], settings=maniskill.ManiSkillEvalSettings("PickCube-v1"))


def test_eval_robustness_splits_refuse_in_one_paragraph(tmp_path: Path) -> None:
    """An unknown PRO category lists the known ones; LIBERO-Plus's light / background / layout say
    what they need (its assets.zip, with the download command)."""
    run = run_cli(["eval", "--suite", "libero_pro_goal", "--categories", "postion", "--config", "libero_tiny_ppo"],
                  cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "Known categories: lan (Language), object (Object), swap (Position), task (Task)" in run.stderr
    run = run_cli(["eval", "--suite", "libero_plus_goal", "--categories", "light", "--config", "libero_tiny_ppo"],
                  cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "assets.zip" in run.stderr and "vlarl download Sylvest/LIBERO-plus" in run.stderr
