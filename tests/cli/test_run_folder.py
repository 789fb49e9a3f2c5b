"""A run folder is a record nobody else can spoil: one writer at a time (an OS lock the kernel drops on any
exit), no new run over an old one without ``--resume``, no file replaced that vlarl did not write, and
``convert --overwrite`` never deletes a run. Commands run in-process through the real entry point."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from vlarl_cli.cli.main import run
from vlarl_cli.training import run_folder

TOY = ("rl-train", "-c", "toy_reach_ppo", "runner.max_epochs=1", "env.train.total_num_envs=8",
       "actor.global_batch_size=32", "actor.micro_batch_size=32",
       "runner.val_check_interval=-1")


def _toy(folder: Path, *extra: str) -> list[str]:
    return [*TOY, f"runner.logger.log_path={folder}", *extra]


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file's bytes but the lock file's (its owner line names the latest process that held it)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != run_folder.LOCK_FILE}


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.delenv(run_folder.OWNER_ENV, raising=False)


def test_a_second_writer_is_refused_naming_the_owner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    with run_folder.claim(folder, command="rl-train", resuming=False):
        (folder / "metrics.jsonl").write_text('{"step": 1}\n')  # the owner is running: that, not its metrics, is said
        # flock conflicts between two open descriptions even inside one process: this is a second writer
        assert run(_toy(folder)) == 2
        assert run(["sft", "-c", "sft_toy_reach", f"runner.logger.log_path={folder}", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("is in use by `vlarl rl-train`") == 2, err
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in err and "Traceback" not in err
    assert (folder / "metrics.jsonl").read_text() == '{"step": 1}\n' and not (folder / "config.yaml").exists()


def test_the_kernel_releases_the_lock_of_a_killed_owner(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    code = ("import sys, time; from vlarl_cli.training import run_folder\n"
            f"with run_folder.claim({str(folder)!r}, command='rl-train'):\n"
            "    print('held', flush=True); time.sleep(120)\n")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "held"
        with pytest.raises(run_folder.FolderInUse, match=f"pid {owner.pid} on host"):
            with run_folder.claim(folder, command="sft"):
                pass
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
    finally:
        if owner.poll() is None:
            owner.kill()
    with run_folder.claim(folder, command="sft"):  # nobody holds it any more: the stale lock file is no obstacle
        info = json.loads((folder / run_folder.LOCK_FILE).read_text())
    assert info["pid"] == os.getpid() and info["command"] == "vlarl sft"


def test_a_new_run_never_replaces_an_old_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    assert run(_toy(folder)) == 0, capsys.readouterr().err
    assert json.loads((folder / run_folder.MANIFEST_FILE).read_text())["files"] == ["config.yaml"]
    before = _snapshot(folder)
    capsys.readouterr()
    assert run(_toy(folder)) == 2  # the same command again, without --resume
    err = capsys.readouterr().err
    assert "already holds a run (checkpoints/, metrics.jsonl)" in err and "--resume auto" in err
    assert _snapshot(folder) == before
    # an override the checkpoint's state would silently win over is refused, before anything is written
    assert run(_toy(folder, "actor.optim.lr=1e-2", "--resume", "auto")) == 2
    err = capsys.readouterr().err
    assert "actor.optim.lr" in err and "would be ignored" in err and _snapshot(folder) == before
    # a damaged checkpoint names its file
    weights = folder / "checkpoints" / "global_step_1" / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:-3] + bytes([good[-3] ^ 1]) + good[-2:])
    assert run(_toy(folder, "--resume", "auto")) == 2
    assert f"{weights} is damaged" in capsys.readouterr().err
    weights.write_bytes(good)
    # any other override applies and is recorded in the run's config history
    assert run(_toy(folder, "runner.max_epochs=2", "--resume", "auto")) == 0  # the lock was released on exit
    assert (folder / "checkpoints" / "global_step_2").is_dir()
    history = json.loads((folder / run_folder.MANIFEST_FILE).read_text())["config_history"]
    assert [(h["iteration"], h["changes"]) for h in history] == [(1, {"runner.max_epochs": [1, 2]})]


@pytest.mark.parametrize("body", ["my: own\n", "actor: {}\n"])
def test_a_file_vlarl_did_not_write_is_never_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     body: str) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text(body)
    assert run(_toy(folder)) == 2
    err = capsys.readouterr().err
    assert "config.yaml exists and vlarl did not write it" in err and "Traceback" not in err
    assert (folder / "config.yaml").read_text() == body
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml"]


def test_a_folder_from_before_the_manifest_counts_its_vlarl_config_as_vlarl_s(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "config.yaml").write_text("actor: {}\nrunner: {}\n")
    run_folder.write_own_text(folder, "config.yaml", "actor: {seed: 1}\nrunner: {}\n")
    assert json.loads((folder / run_folder.MANIFEST_FILE).read_text())["files"] == ["config.yaml"]
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(run_folder.ConfigError, match=r"notes\.txt exists and vlarl did not write it"):
        run_folder.write_own_text(folder, "notes.txt", "theirs")
    assert (folder / "notes.txt").read_text() == "mine"


def test_convert_overwrite_never_deletes_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    (runs / "a" / "checkpoints" / "global_step_1").mkdir(parents=True)
    (runs / "a" / "checkpoints" / "global_step_1" / "trainer_state.json").write_text("{}")
    (runs / "a" / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.safetensors").write_bytes(b"x")
    before = _snapshot(runs)
    for dst in (runs, runs / "a", runs / "a" / "checkpoints" / "global_step_1"):
        assert run(["convert", str(tmp_path / "src"), str(dst), "--to", "openpi", "--overwrite"]) == 2
        err = capsys.readouterr().err
        assert "holds the record of a run" in err and "trainer_state.json" in err, err
    assert _snapshot(runs) == before


def test_an_empty_log_path_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("mine")
    assert run([*TOY, "runner.logger.log_path="]) == 2
    assert "log_path must name a folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_resume_overrides_apply_and_are_recorded_or_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vlarl_cli.config.loading import load_config, to_yaml

    run, ckpt = tmp_path / "run", tmp_path / "run" / "checkpoints" / "global_step_4"
    ckpt.mkdir(parents=True)
    (ckpt / "config.yaml").write_text(to_yaml(load_config("toy_reach_ppo").config))
    (ckpt / "trainer_state.json").write_text('{"iteration": 4}')
    for refused in ("actor.optim.lr=1e-2", "actor.optim.adam_beta2=0.9", "actor.seed=7", "actor.model.denoising_steps=2"):
        with pytest.raises(run_folder.ConfigError, match="would be ignored") as err:
            run_folder.check_resume_config(run, ckpt, load_config("toy_reach_ppo", [refused]).config)
        assert refused.split("=")[0] in err.value.problem
    assert not (run / run_folder.MANIFEST_FILE).exists()  # nothing recorded for a refused resume
    # the schedule's shape and everything outside the checkpoint's state apply (read from the config each step)
    applied = ["actor.optim.lr_scheduler=cosine", "actor.optim.clip_grad=0.5", "runner.max_epochs=9"]
    changes = run_folder.check_resume_config(run, ckpt, load_config("toy_reach_ppo", applied).config)
    assert set(changes) == {"actor.optim.lr_scheduler", "actor.optim.clip_grad", "runner.max_epochs"}
    assert "resume with a changed config" in capsys.readouterr().out
    history = json.loads((run / run_folder.MANIFEST_FILE).read_text())["config_history"]
    assert history[0]["iteration"] == 4 and history[0]["changes"]["actor.optim.lr_scheduler"] == ["constant", "cosine"]
