"""Every checkpoint carries sha256 per file (``checksums.json``, written last); resume, eval and convert verify
it and name the damaged file; a ``latest`` pointer never leads out of its folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from vlarl_cli.checkpoints.integrity import CHECKSUMS, follow_latest, sha256_file, verify_checksums
from vlarl_cli.errors import CheckpointError
from vlarl_cli.training import checkpoint as ckpt


def _save(run: Path, iteration: int = 3) -> Path:
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters())
    return ckpt.save_checkpoint(run, model_state=model.state_dict(), optimizer_state=opt.state_dict(), scheduler=None,
                                generators={"g": torch.Generator().manual_seed(0)},
                                trainer_state=ckpt.TrainerState(iteration=iteration), config_yaml="actor: {}\n")


def _flip_a_byte(path: Path, offset: int = -5) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_checksums_cover_every_file_and_match_them(tmp_path: Path) -> None:
    folder = _save(tmp_path / "run")
    (folder / "ema").mkdir()  # written by export before the checksums in SFT checkpoints; here: after, by hand
    sums = json.loads((folder / CHECKSUMS).read_text())["sha256"]
    assert sorted(sums) == ["config.yaml", "model.safetensors", "optimizer.pt", "rng.pt", "trainer_state.json"]
    assert all(sums[name] == sha256_file(folder / name) for name in sums)
    assert ckpt.resolve_checkpoint(tmp_path / "run", "auto") == folder


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt", "trainer_state.json", "config.yaml"])
def test_a_flipped_byte_is_named_on_resume(tmp_path: Path, name: str) -> None:
    folder = _save(tmp_path / "run")
    _flip_a_byte(folder / name)
    with pytest.raises(CheckpointError, match="is damaged") as err:
        ckpt.resolve_checkpoint(tmp_path / "run", "auto")
    assert str(folder / name) in err.value.problem
    with pytest.raises(CheckpointError, match="is damaged"):  # an explicit folder is verified too
        ckpt.resolve_checkpoint(tmp_path, str(folder))


def test_a_missing_file_and_a_damaged_list_are_named(tmp_path: Path) -> None:
    folder = _save(tmp_path / "run")
    (folder / "rng.pt").unlink()
    with pytest.raises(CheckpointError, match=r"is missing rng\.pt"):
        verify_checksums(folder)
    (folder / CHECKSUMS).write_text('{"sha256": {"../outside": "00"}}')
    with pytest.raises(CheckpointError, match="outside the checkpoint folder"):
        verify_checksums(folder)
    (folder / CHECKSUMS).write_text("[1]")
    with pytest.raises(CheckpointError, match=r"checksums\.json .* is damaged"):
        verify_checksums(folder)


def test_a_checkpoint_from_before_checksums_is_used_with_a_note(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    folder = _save(tmp_path / "run")
    (folder / CHECKSUMS).unlink()
    assert ckpt.resolve_checkpoint(tmp_path / "run", "auto") == folder
    assert "has no checksums.json" in capsys.readouterr().out


@pytest.mark.parametrize("pointer", ["../../elsewhere", "/etc", "..", "", "global_step_3/../../x", "link"])
def test_latest_never_leads_out_of_its_folder(tmp_path: Path, pointer: str) -> None:
    _save(tmp_path / "run")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    checkpoints = tmp_path / "run" / "checkpoints"
    os.symlink(outside, checkpoints / "link")
    (checkpoints / "latest").write_text(pointer + "\n")
    with pytest.raises(CheckpointError, match="not a checkpoint folder inside"):
        ckpt.resolve_checkpoint(tmp_path / "run", "auto")
    with pytest.raises(CheckpointError, match="not a checkpoint folder inside"):
        follow_latest(checkpoints)


def test_eval_verifies_the_checkpoint_it_loads(tmp_path: Path) -> None:
    from vlarl_cli.training.evaluation.source import resolve_checkpoint_folder

    folder = _save(tmp_path / "run")
    assert resolve_checkpoint_folder(tmp_path / "run") == folder.resolve()  # the run folder: its latest
    _flip_a_byte(folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors is damaged"):
        resolve_checkpoint_folder(tmp_path / "run")
    (tmp_path / "run" / "checkpoints" / "latest").write_text("../../..\n")
    with pytest.raises(CheckpointError, match="not a checkpoint folder inside"):
        resolve_checkpoint_folder(tmp_path / "run")


def test_paths_read_from_files_follow_links_but_never_climb_out(tmp_path: Path) -> None:
    """A dataset in the hub's cache: every file of the snapshot is a link into ``blobs/``, outside it."""
    from vlarl_cli.checkpoints.integrity import contained
    from vlarl_cli.errors import VlarlError

    root, blobs = tmp_path / "snapshots" / "rev", tmp_path / "blobs"
    (root / "videos").mkdir(parents=True)
    blobs.mkdir()
    (blobs / "abc").write_text("frames")
    os.symlink(blobs / "abc", root / "videos" / "file-000.mp4")
    assert contained(root, "videos/file-000.mp4", "video_path").read_text() == "frames"
    for bad in ["../x", "videos/../../x", "/etc/passwd", "", "a\x00b", 3]:
        with pytest.raises(VlarlError, match="not a path inside"):
            contained(root, bad, "video_path")
