"""scripts/link_identical.py: CI's venvs share identical files through hard links, and nothing else changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "link_identical.py"
BIG = 64 * 1024  # the script's MIN_BYTES


def _write(path: Path, data: bytes, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


def _run(*trees: Path) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), *map(str, trees)], check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_identical_files_become_one_inode_and_the_first_tree_is_untouched(tmp_path: Path) -> None:
    torch_bytes = os.urandom(BIG + 5)
    keep = _write(tmp_path / "venv/lib/torch/libtorch.so", torch_bytes)
    keep_inode = keep.stat().st_ino
    copy = _write(tmp_path / "ref_a/lib/torch/libtorch.so", torch_bytes)
    renamed = _write(tmp_path / "ref_b/elsewhere/same_bytes.bin", torch_bytes)
    # same size, one byte differs; same bytes, other permission bits; same bytes, too small to bother
    other = _write(tmp_path / "ref_a/lib/torch/other.so", torch_bytes[:-1] + bytes([torch_bytes[-1] ^ 1]))
    executable = _write(tmp_path / "ref_a/bin/tool", torch_bytes, mode=0o755)
    small_bytes = os.urandom(100)
    _write(tmp_path / "venv/small.py", small_bytes)
    small = _write(tmp_path / "ref_a/small.py", small_bytes)

    result = _run(tmp_path / "venv", tmp_path / "ref_a", tmp_path / "ref_b", tmp_path / "absent")

    assert keep.stat().st_ino == keep_inode  # the first tree is never replaced
    assert copy.stat().st_ino == keep_inode and renamed.stat().st_ino == keep_inode
    assert other.stat().st_ino != keep_inode and executable.stat().st_ino != keep_inode
    assert small.stat().st_ino != (tmp_path / "venv/small.py").stat().st_ino
    assert copy.read_bytes() == torch_bytes and other.read_bytes() != torch_bytes
    assert oct(executable.stat().st_mode & 0o777) == oct(0o755)
    assert result["files_linked"] == 2 and result["files_left"] == 0
    assert result["mib_saved"] == 0  # 2 x 64 KiB: under one MiB
    assert result["trees"] == [str(tmp_path / name) for name in ("venv", "ref_a", "ref_b")]
    assert not list(tmp_path.rglob("*.vlarl-link"))  # no temporary link left behind


def test_later_trees_share_among_themselves_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    data = os.urandom(BIG)
    _write(tmp_path / "venv/unrelated.bin", os.urandom(BIG))
    first = _write(tmp_path / "ref/a/pyarrow.so", data)
    second = _write(tmp_path / "ref/b/pyarrow.so", data)

    assert _run(tmp_path / "venv", tmp_path / "ref")["files_linked"] == 1
    assert first.stat().st_ino == second.stat().st_ino and first.stat().st_nlink == 2
    assert _run(tmp_path / "venv", tmp_path / "ref")["files_linked"] == 0
    second.unlink()  # pip uninstalling one venv's copy leaves the other's file whole
    assert first.read_bytes() == data


def test_files_only_the_first_tree_holds_are_never_hashed(tmp_path: Path, monkeypatch) -> None:
    """The first tree is never changed, so same-size files found only there cost no read (CI calls the script
    with .venv first, many times)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("link_identical", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    hashed: list[Path] = []
    real = module.sha256
    monkeypatch.setattr(module, "sha256", lambda path: hashed.append(path) or real(path))
    data = os.urandom(BIG)
    _write(tmp_path / "venv/a.so", data)
    _write(tmp_path / "venv/b.so", data)
    _write(tmp_path / "ref/other.so", os.urandom(BIG + 1))

    assert module.link_trees([tmp_path / "venv", tmp_path / "ref"])["files_linked"] == 0
    assert hashed == []
    copy = _write(tmp_path / "ref/a.so", data)  # a later tree's copy: now the group is read
    assert module.link_trees([tmp_path / "venv", tmp_path / "ref"])["files_linked"] == 1
    assert len(hashed) == 3 and copy.stat().st_ino == (tmp_path / "venv/a.so").stat().st_ino
