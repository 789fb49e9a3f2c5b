"""Atomic write helpers: content round trips, nothing left behind, old content survives failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vlarl_cli.checkpoints.atomic import (
    TMP_PREFIX,
    atomic_directory,
    atomic_open,
    atomic_save_safetensors,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(TMP_PREFIX))


def test_bytes_text_json_round_trip(tmp_path: Path) -> None:
    atomic_write_bytes(tmp_path / "a" / "b.bin", b"\x00\x01\xff")
    assert (tmp_path / "a" / "b.bin").read_bytes() == b"\x00\x01\xff"
    atomic_write_text(tmp_path / "t.txt", "héllo\n")
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == "héllo\n"
    obj = {"success_rate": 0.9375, "episodes": [1, 2, 3], "name": "libéro"}
    atomic_write_json(tmp_path / "r.json", obj)
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8")) == obj
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "a") == []


def test_overwrite_replaces_content(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"


def test_failure_keeps_old_file_and_cleans_temp(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    atomic_write_bytes(target, b"old")
    with pytest.raises(RuntimeError), atomic_open(target, "wb") as fh:
        fh.write(b"partial new data")
        raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_unserialisable_json_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "x.json", {"bad": object()})
    assert list(tmp_path.iterdir()) == []


def test_atomic_open_rejects_append(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="modes"), atomic_open(tmp_path / "x", "ab"):
        pass


def test_safetensors_exact_round_trip(tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file

    g = torch.Generator().manual_seed(0)
    tensors = {
        "w": torch.randn(3, 4, generator=g),
        "b16": torch.randn(5, generator=g).to(torch.bfloat16),
        "t": torch.randn(4, 3, generator=g).t(),  # non-contiguous view must be accepted
    }
    out = atomic_save_safetensors(tensors, tmp_path / "m.safetensors", metadata={"format": "pt"})
    loaded = load_file(out)
    assert set(loaded) == set(tensors)
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype
        assert torch.equal(loaded[k], v)  # atol=0
    with safe_open(out, "pt") as f:
        assert f.metadata() == {"format": "pt"}
    assert _leftovers(tmp_path) == []


def test_safetensors_failure_keeps_old(tmp_path: Path) -> None:
    target = tmp_path / "m.safetensors"
    atomic_save_safetensors({"w": torch.ones(2)}, target)
    shared = torch.zeros(4)
    with pytest.raises(Exception):  # noqa: B017 - safetensors raises its own error type for shared storage
        atomic_save_safetensors({"a": shared, "b": shared}, target)
    from safetensors.torch import load_file

    assert torch.equal(load_file(target)["w"], torch.ones(2))
    assert _leftovers(tmp_path) == []


def test_directory_success_and_replace(tmp_path: Path) -> None:
    target = tmp_path / "ckpt" / "global_step_1"
    with atomic_directory(target) as tmp:
        assert tmp.parent == target.parent and tmp != target
        assert not target.exists()  # nothing visible under the final name while writing
        (tmp / "sub").mkdir()
        (tmp / "sub" / "x.txt").write_text("1")
    assert (target / "sub" / "x.txt").read_text() == "1"
    with atomic_directory(target) as tmp:
        (tmp / "y.txt").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["y.txt"]  # replaced, not merged
    assert _leftovers(target.parent) == []


def test_directory_failure_keeps_old(tmp_path: Path) -> None:
    target = tmp_path / "d"
    with atomic_directory(target) as tmp:
        (tmp / "keep.txt").write_text("old")
    with pytest.raises(KeyError), atomic_directory(target) as tmp:
        (tmp / "keep.txt").write_text("half")
        raise KeyError("crash")
    assert (target / "keep.txt").read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_directory_no_overwrite(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(FileExistsError), atomic_directory(tmp_path / "d", overwrite=False):
        pass


def test_modes_follow_umask_not_tempfile(tmp_path):
    import os
    import stat

    mask = os.umask(0)
    os.umask(mask)
    f = atomic_write_text(tmp_path / "a.txt", "x")
    assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600
    with atomic_directory(tmp_path / "d") as tmp:
        (tmp / "x").write_text("1")
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o777 & ~mask  # not mkdtemp's 0700
    st = atomic_save_safetensors({"w": torch.zeros(1)}, tmp_path / "m.safetensors").stat()
    assert stat.S_IMODE(st.st_mode) == 0o666 & ~mask
