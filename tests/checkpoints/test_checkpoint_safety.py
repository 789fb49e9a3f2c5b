"""Pickle gate, path containment and git blob hashing."""

from __future__ import annotations

import hashlib
import os

import pytest
import torch
from safetensors.torch import save_file

from vlarl_cli.checkpoints.hub import RENAMED_REPOS, _select_paths, git_blob_sha1, resolve_repo_id
from vlarl_cli.checkpoints.safety import is_pickle_file, load_state_dict, safe_join
from vlarl_cli.errors import CheckpointError, HubError


class Payload:
    """Unpickling this would call os.system: weights_only=True must refuse it."""

    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_git_blob_sha1_matches_git():
    # `printf 'hello\n' | git hash-object --stdin` and the empty blob id, both well-known constants.
    assert git_blob_sha1(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert git_blob_sha1(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert git_blob_sha1(b"x") != hashlib.sha1(b"x").hexdigest()


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/passwd", "C:x", "a\\b", "a//b", "./a", "", "a/",
                                  "a/\x00b", ".."])
def test_safe_join_rejects(tmp_path, name):
    with pytest.raises(HubError, match="unsafe file name"):
        safe_join(tmp_path, name)


def test_safe_join_accepts_nested_and_dotfiles(tmp_path):
    assert safe_join(tmp_path, "a/b/c.json") == tmp_path / "a" / "b" / "c.json"
    assert safe_join(tmp_path, ".gitattributes") == tmp_path / ".gitattributes"
    assert safe_join(tmp_path, "a..b/x") == tmp_path / "a..b" / "x"  # '..' only as a whole segment


def test_safe_join_refuses_escape_through_symlink(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(HubError, match="outside"):
        safe_join(root, "link/file.txt")
    with pytest.raises(HubError, match="outside"):
        safe_join(root, "link/deeper/file.txt")
    # A symlink as the last component is returned as is (callers replace it, never write through it).
    assert safe_join(root, "link") == root / "link"


def test_pickle_refused_without_flag_and_weights_only_with_it(tmp_path):
    sd = {"w": torch.arange(6.0).reshape(2, 3)}
    torch.save(sd, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match="--allow-pickle"):
        load_state_dict(tmp_path / "model.pt")
    loaded = load_state_dict(tmp_path / "model.pt", allow_pickle=True)
    assert torch.equal(loaded["w"], sd["w"])

    torch.save({"w": torch.zeros(1), "evil": Payload()}, tmp_path / "evil.bin")
    with pytest.raises(CheckpointError, match="weights_only=True"):
        load_state_dict(tmp_path / "evil.bin", allow_pickle=True)


def test_safetensors_loads_and_bad_files_are_named(tmp_path):
    save_file({"a": torch.ones(2, dtype=torch.bfloat16)}, tmp_path / "m.safetensors")
    assert load_state_dict(tmp_path / "m.safetensors")["a"].dtype == torch.bfloat16
    (tmp_path / "bad.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_state_dict(tmp_path / "bad.safetensors")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_state_dict(tmp_path / "missing.safetensors")
    (tmp_path / "w.npz").write_bytes(b"")
    with pytest.raises(CheckpointError, match="neither"):
        load_state_dict(tmp_path / "w.npz")


def test_pickle_suffixes():
    assert all(is_pickle_file(n) for n in ["pytorch_model.bin", "x.PT", "a/b.pth", "c.ckpt", "d.pkl"])
    assert not any(is_pickle_file(n) for n in ["model.safetensors", "config.json", "binary.txt"])


def test_renames_and_filters():
    assert resolve_repo_id("RLinf/RLinf-Pi05-SFT") == (
        "RLinf/RLinf-Pi05-LIBERO-SFT",
        "RLinf/RLinf-Pi05-SFT is now published as RLinf/RLinf-Pi05-LIBERO-SFT; downloading "
        "RLinf/RLinf-Pi05-LIBERO-SFT.")
    assert resolve_repo_id("a/b") == ("a/b", None)
    assert all(new not in RENAMED_REPOS for new in RENAMED_REPOS.values())  # no chains/cycles

    files = ["config.json", "assets/a/norm_stats.json", "model.safetensors", "optimizer.pt"]
    assert _select_paths(files, None, None) == files
    assert _select_paths(files, ["*.json"], None) == ["config.json", "assets/a/norm_stats.json"]
    assert _select_paths(files, None, ["assets/"]) == ["config.json", "model.safetensors", "optimizer.pt"]
    assert _select_paths(files, ["*.json"], ["assets/*"]) == ["config.json"]

