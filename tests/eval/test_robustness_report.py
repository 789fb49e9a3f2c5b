"""The robustness report: per-category tallies, the episode-weighted total, intervals and the written files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlarl_cli.envs.libero_plus.catalog import CATEGORIES as PLUS
from vlarl_cli.envs.libero_plus.catalog import plus_tasks
from vlarl_cli.envs.libero_pro.catalog import CATEGORIES as PRO
from vlarl_cli.errors import EnvError
from vlarl_cli.training.evaluation.robustness import (
    REPORT_JSON,
    REPORT_PNG,
    build_report,
    print_report,
    tally,
    write_report,
)
from vlarl_cli.training.evaluation.stats import newcombe_interval, wilson_interval


def _outcomes(counts: dict[str, tuple[int, int]]) -> list[tuple[str, bool]]:
    return [(key, i < k) for key, (k, n) in counts.items() for i in range(n)]


def test_tally_counts_each_category_and_the_total() -> None:
    rows = tally(_outcomes({"swap": (3, 10), "lan": (1, 4)}), PRO, inputs=("state",))
    assert [(r.key, r.successes, r.episodes) for r in rows] == [("lan", 1, 4), ("swap", 3, 10), ("total", 4, 14)]
    assert rows[0].ci95 == wilson_interval(1, 4)
    # a state-mode policy cannot see a language perturbation, but sees the swapped positions
    assert [r.visible for r in rows] == [False, True, True]
    with pytest.raises(EnvError, match='category "camera"'):
        tally([("camera", True)], PRO, inputs=("images",))


def test_total_is_episode_weighted_like_the_plus_leaderboard() -> None:
    """OpenVLA-OFT's published row: columns 56.4 31.9 79.5 88.7 93.3 75.8 74.2 and Total 69.6, which is the
    episode-weighted rate over the 10,030 tasks (the plain mean of the columns would be 71.4)."""
    published = {"camera": 56.4, "robot": 31.9, "language": 79.5, "light": 88.7, "background": 93.3,
                 "noise": 75.8, "layout": 74.2}
    sizes = {c.key: sum(t.category == c.key for t in plus_tasks()) for c in PLUS}
    counts = {k: (round(published[k] / 100 * n), n) for k, n in sizes.items()}
    total = tally(_outcomes(counts), PLUS, inputs=("images", "state", "language"))[-1]
    assert total.episodes == 10_030
    assert round(100 * total.rate, 1) == 69.6


def test_two_checkpoints_side_by_side(tmp_path: Path) -> None:
    sft = _outcomes({"swap": (2, 20), "task": (0, 20)})
    rl = _outcomes({"swap": (9, 20), "task": (1, 20)})
    report = build_report("LIBERO-PRO", "libero_pro_goal", PRO, {"SFT": sft, "RL": rl},
                          inputs={"SFT": ("state",), "RL": ("state",)}, deviations=["obs_mode state"])
    diffs = report.differences()
    assert [d["key"] for d in diffs] == ["swap", "task", "total"]
    d, lo, hi = newcombe_interval(2, 20, 9, 20)
    assert diffs[0]["difference"] == pytest.approx(d) and diffs[0]["ci95"] == [lo, hi]
    assert diffs[0]["significant"] == (lo > 0)
    json_path, png_path = write_report(tmp_path, report)
    assert json_path == tmp_path / REPORT_JSON and png_path == tmp_path / REPORT_PNG
    data = json.loads(json_path.read_text())
    assert data["runs"]["RL"][0] | {"rate": 0.45} == data["runs"]["RL"][0]
    assert data["deviations"] == ["obs_mode state"]
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from rich.console import Console

    console = Console(width=160, record=True)
    print_report(report, console)
    text = console.export_text()
    assert "Position" in text and "45.0%" in text and "RL - SFT" in text


def test_checkpoints_on_different_episodes_are_refused() -> None:
    with pytest.raises(EnvError, match="different episodes"):
        build_report("LIBERO-PRO", "libero_pro", PRO,
                     {"A": _outcomes({"swap": (1, 5)}), "B": _outcomes({"swap": (1, 6)})},
                     inputs={"A": ("images",), "B": ("images",)})
    with pytest.raises(EnvError, match="one or two checkpoints"):
        build_report("LIBERO-PRO", "libero_pro", PRO, {}, inputs={})


def _folder(path: Path, outcomes: dict[tuple[str, int, int], bool], obs_mode: str = "state") -> Path:
    from vlarl_cli.checkpoints.atomic import atomic_write_json
    from vlarl_cli.video.episodes import EpisodeLog, EpisodeRecord

    path.mkdir(parents=True)
    atomic_write_json(path / "card.json", {"protocol": "standard", "obs_mode": obs_mode,
                                           "deviations": ["obs_mode state: no camera"]})
    log = EpisodeLog(path / "episodes.jsonl")
    for (suite, task, trial), success in outcomes.items():
        log.append(EpisodeRecord(suite, task, trial, task * 50 + trial, "t", "l", success, 10, 7, 220, 10))
    return path


def test_report_from_two_results_folders_uses_their_common_episodes(tmp_path: Path) -> None:
    from vlarl_cli.training.evaluation.robustness import report_from_folders

    sft = _folder(tmp_path / "sft", {("libero_spatial", 0, 0): True, ("libero_spatial_swap", 0, 0): False,
                                     ("libero_spatial_swap", 0, 1): False, ("libero_spatial_task", 0, 0): False})
    rl = _folder(tmp_path / "rl", {("libero_spatial", 0, 0): True, ("libero_spatial_swap", 0, 0): True,
                                   ("libero_spatial_swap", 0, 1): True, ("libero_spatial_lan", 0, 0): True})
    report = report_from_folders([sft, rl])
    assert report.labels == ["sft", "rl"] and report.split == "libero_spatial"
    # only the episodes both folders hold: original (1) and swap (2); task and lan are in one folder each
    assert [(r.key, r.successes, r.episodes) for r in report.runs["rl"]] == [
        ("original", 1, 1), ("swap", 2, 2), ("total", 2, 2)]  # the unperturbed row is not in the total
    assert report.inputs["sft"] == ("state",) and report.deviations == [
        "rl: obs_mode state: no camera", "sft: obs_mode state: no camera"]
    with pytest.raises(EnvError, match="not part of LIBERO-PRO or LIBERO-Plus"):
        report_from_folders([_folder(tmp_path / "x", {("libero_90", 0, 0): True})])


def test_a_libero_plus_folder_reports_in_its_leaderboard_categories(tmp_path: Path) -> None:
    from vlarl_cli.training.evaluation.robustness import report_from_folders

    plus = _folder(tmp_path / "plus", {("libero_plus_goal_noise", 0, 0): True, ("libero_plus_goal_camera", 0, 0): False,
                                       ("libero_plus_goal_camera", 1, 0): True, ("libero_plus_10_robot", 3, 0): False})
    report = report_from_folders([plus])
    assert report.benchmark == "LIBERO-Plus" and report.split == "libero_10, libero_goal"
    assert [(r.key, r.successes, r.episodes) for r in report.runs["plus"]] == [  # the leaderboard's column order
        ("camera", 1, 2), ("robot", 0, 1), ("noise", 1, 1), ("total", 2, 4)]


def test_cli_robustness_of_two_folders_writes_the_report(tmp_path: Path) -> None:
    sft = _folder(tmp_path / "sft", {("libero_goal_swap", 0, 0): False, ("libero_goal_task", 0, 0): False})
    rl = _folder(tmp_path / "rl", {("libero_goal_swap", 0, 0): True, ("libero_goal_task", 0, 0): False})
    run = subprocess.run([sys.executable, "-m", "vlarl_cli.cli.main", "eval", "--robustness", str(sft),
                          "--robustness", str(rl), "--out", str(tmp_path / "rep")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Position" in run.stdout and "rl - sft" in run.stdout.lower()
    data = json.loads((tmp_path / "rep" / REPORT_JSON).read_text())
    assert [r["successes"] for r in data["runs"]["rl"]] == [1, 0, 1] and (tmp_path / "rep" / REPORT_PNG).is_file()
