"""`vlarl eval` / `vlarl video` with nothing named take the newest checkpoint / evaluation (training/runs.py).

The choice is checked on run folders laid out as training/checkpoint.py writes them, with their write times
set; one real evaluation and re-simulation in LIBERO (a tiny pi0, 1 episode of 3 steps) checks the CLI takes
and prints that choice.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from vlarl_cli.errors import CheckpointError, ConfigError
from vlarl_cli.training.runs import choose_checkpoint, newest_checkpoint, newest_episodes, run_folders
from vlarl_cli.video.episodes import ResultsError


def _checkpoint(run: Path, step: int, written_at: float, *, latest: bool = True, config: str = "x: 1\n") -> Path:
    folder = run / "checkpoints" / f"global_step_{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "config.yaml").write_text(config)
    os.utime(folder / "config.yaml", (written_at, written_at))
    if latest:
        (run / "checkpoints" / "latest").write_text(f"global_step_{step}\n")
    return folder


def test_the_newest_run_is_the_one_that_saved_last(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _checkpoint(runs / "a", 10, 1000)
    b5 = _checkpoint(runs / "b", 5, 3000)
    _checkpoint(runs / "c", 20, 2000)
    (runs / "no_checkpoints" / "eval").mkdir(parents=True)
    assert run_folders(runs) == [runs / "a", runs / "b", runs / "c"]
    assert choose_checkpoint(root=runs) == b5  # saved last, though c has the highest step
    os.utime(runs / "c" / "checkpoints" / "global_step_20" / "config.yaml", (4000, 4000))
    assert choose_checkpoint(root=runs) == runs / "c" / "checkpoints" / "global_step_20"


def test_a_run_s_newest_checkpoint_is_the_one_latest_names(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _checkpoint(run, 2, 100)
    _checkpoint(run, 8, 200, latest=False)
    four = _checkpoint(run, 4, 300)  # a resume from step 2 saved step 4 after step 8
    assert newest_checkpoint(run) == four
    (run / "checkpoints" / "latest").write_text("global_step_99\n")  # names nothing complete: highest step
    assert newest_checkpoint(run) == run / "checkpoints" / "global_step_8"
    (run / "checkpoints" / "global_step_12").mkdir()  # being written: no config.yaml yet
    assert newest_checkpoint(run) == run / "checkpoints" / "global_step_8"
    assert choose_checkpoint(run) == run / "checkpoints" / "global_step_8"


def test_runs_folder_itself_and_nested_runs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _checkpoint(runs, 1, 100)  # runner.logger.log_path left at its default "runs"
    nested = _checkpoint(runs / "sweep" / "lr1e-5", 3, 200)
    assert run_folders(runs) == [runs, runs / "sweep" / "lr1e-5"]
    assert choose_checkpoint(root=runs) == nested


def test_no_checkpoint_names_rl_train_and_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "runs" / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError) as err:
        choose_checkpoint(root=tmp_path / "runs")
    assert "vlarl rl-train" in str(err.value) and "--checkpoint" in str(err.value)
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        choose_checkpoint(tmp_path / "runs" / "empty")


def test_newest_episodes_from_eval_and_from_training(tmp_path: Path) -> None:
    evals, runs = tmp_path / "eval", tmp_path / "runs"
    with pytest.raises(ResultsError, match="vlarl eval"):
        newest_episodes((evals, runs))
    logs = [evals / "a_global_step_5" / "libero_10_standard" / "episodes.jsonl",
            runs / "quickstart" / "eval" / "iter_00005" / "episodes.jsonl",
            evals / "b" / "libero_spatial_standard" / "episodes.jsonl"]
    for i, log in enumerate(logs):
        log.parent.mkdir(parents=True)
        log.write_text("")
        os.utime(log, (1000 + 10 * i, 1000 + 10 * i))
    assert newest_episodes((evals, runs)) == logs[2]
    os.utime(logs[1], (5000, 5000))
    assert newest_episodes((evals, runs)) == logs[1]


def _tiny_runs(root: Path) -> tuple[Path, Path]:
    """Two runs of the tiny pi0 (libero_tiny_ppo) with one real checkpoint each; the second saved last."""
    from safetensors.torch import save_file

    from vlarl_cli.config.loading import load_config, to_yaml
    from vlarl_cli.training.evaluation import load_policy

    policy, _, _ = load_policy(None, "libero_tiny_ppo", [])
    config = to_yaml(load_config("libero_tiny_ppo").config)
    older = _checkpoint(root / "runs" / "older", 7, 1000, config=config)
    newer = _checkpoint(root / "runs" / "newer", 3, 2000, config=config)
    for folder in (older, newer):
        save_file({k: v.contiguous() for k, v in policy.state_dict().items()}, str(folder / "model.safetensors"))
    return older, newer


def test_eval_cli_passes_the_newest_checkpoint_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The command's wiring (the evaluation itself is replaced; the slow test below runs it in LIBERO)."""
    from vlarl_cli.cli import eval as eval_cli
    from vlarl_cli.training import evaluation

    older = _checkpoint(tmp_path / "runs" / "older", 7, 1000)
    newer = _checkpoint(tmp_path / "runs" / "newer", 3, 2000)
    monkeypatch.chdir(tmp_path)
    taken: list[tuple[Path | None, str | None]] = []
    monkeypatch.setattr(evaluation, "evaluate", lambda ckpt, config, *a, **k: taken.append((ckpt, config)))
    defaults = dict(tasks=None, trials=1, protocol="standard", temperature=None, deterministic=False, num_envs=1,
                    num_workers=None, out=None, resume=True, max_steps=None, settle_steps=None, resolution=256,
                    live_video=0, seed=0, env_seed=None, render_quality="exact", task=None, episodes=1, compare=None,
                    overrides=None, categories=None, robustness=None)
    eval_cli.command(suite="libero_spatial", checkpoint=None, run=None, config=None, **defaults)
    eval_cli.command(suite="libero_spatial", checkpoint=None, run=Path("runs/older"), config="libero_tiny_ppo",
                     **defaults)
    eval_cli.command(suite="libero_spatial", checkpoint=None, run=None, config="libero_tiny_ppo", **defaults)
    assert taken == [(newer.relative_to(tmp_path), None), (older.relative_to(tmp_path), "libero_tiny_ppo"),
                     (None, "libero_tiny_ppo")]
    printed = capsys.readouterr().out
    assert "newest run under runs/: runs/newer/checkpoints/global_step_3\n  config: " \
           "runs/newer/checkpoints/global_step_3/config.yaml" in printed
    assert "of runs/older: runs/older/checkpoints/global_step_7\n  config: libero_tiny_ppo" in printed
    with pytest.raises(ConfigError, match="--run and --checkpoint"):
        eval_cli.command(suite="libero_spatial", checkpoint=older, run=Path("runs/older"), config=None, **defaults)


def test_video_cli_passes_the_newest_episodes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from vlarl_cli.cli import video as video_cli
    from vlarl_cli.video import api

    log = tmp_path / "runs" / "quickstart" / "eval" / "iter_00005" / "episodes.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("")
    monkeypatch.chdir(tmp_path)
    taken: list[Path | None] = []
    monkeypatch.setattr(api, "render_videos", lambda episodes, **k: taken.append(episodes))
    defaults = dict(episode=0, failures=False, task=None, suite=None, trial=0, against=None, checkpoint=None,
                    config=None, overrides=None, compare_checkpoint=None, protocol="standard", max_steps=None,
                    resolution=None, out=None, fps=20)
    video_cli.command(episodes=None, **defaults)
    assert taken == [log.relative_to(tmp_path)]
    assert f"newest evaluation: {log.relative_to(tmp_path)}" in capsys.readouterr().out


def test_video_cli_with_no_evaluation_names_vlarl_eval(tmp_path: Path) -> None:
    video = run_cli(["video", "--failures"], cwd=tmp_path, timeout=120)
    assert video.returncode == 2 and "vlarl eval" in video.stderr and "Traceback" not in video.stderr


@pytest.mark.slow  # ~30 s of CPU: a LIBERO evaluation and a re-simulation; the two tests above cover the wiring
@pytest.mark.libero
def test_eval_and_video_with_nothing_named_take_the_newest(tmp_path: Path) -> None:
    _, newer = _tiny_runs(tmp_path)
    args = ["--suite", "libero_spatial", "--tasks", "0", "--trials", "1", "--max-steps", "3", "--settle-steps", "1",
            "--num-envs", "1", "--num-workers", "1", "--resolution", "128"]
    run = run_cli(["eval", *args], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "newest run under runs/: runs/newer/checkpoints/global_step_3" in run.stdout
    results = tmp_path / "eval" / "newer_global_step_3" / "libero_spatial_standard"
    assert str(newer.resolve()) in (results / "card.json").read_text()
    assert len((results / "episodes.jsonl").read_text().splitlines()) == 1

    video = run_cli(["video", "--episode", "0"], cwd=tmp_path)
    assert video.returncode == 0, video.stderr
    assert f"newest evaluation: {results.relative_to(tmp_path)}/episodes.jsonl" in video.stdout
    assert [p.name for p in (results / "videos").glob("*.mp4")] == ["libero_spatial_task00_trial00.mp4"]


def test_a_mistyped_suite_is_named_before_the_run_choice(tmp_path: Path) -> None:
    run = run_cli(["eval", "--suite", "libero_spatail"], cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and 'Did you mean "libero_spatial"' in run.stderr and "Nothing to evaluate" not in run.stderr
