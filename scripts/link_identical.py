#!/usr/bin/env python3
"""Hard-link byte-identical files between virtual environments, to keep CI's disk use down.

    python3 scripts/link_identical.py .venv .reference/openpi [more trees ...]

The first tree is never changed. A regular file in a later tree that has the same size, the same
permission bits and the same sha256 as a file met earlier (in an earlier tree, or earlier in the same
tree) is replaced by a hard link to it (atomically: link under a temporary name, then rename).

Why: CI builds the project's venv, five isolated reference venvs and two check venvs; each holds its own
copy of the same torch (about 750 MB), robosuite, pyarrow ... and a fresh CI machine ran out of disk. The
environments stay separate (each venv still imports only what is installed in it); only the bytes are
shared. Nothing edits an installed file in place (pip removes and writes files, Python writes .pyc files
beside them), so a shared inode is never changed under another venv. Files on another filesystem are left
as they are; a tree that does not exist is left out. Stdlib only: runs with the system python before any venv
exists. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import sys
from collections import defaultdict
from pathlib import Path

MIN_BYTES = 64 * 1024  # smaller files are not worth a hash: the bulk is in a few hundred large ones


def regular_files(tree: Path) -> list[tuple[Path, os.stat_result]]:
    """Every regular file of at least MIN_BYTES under `tree` (symlinks not followed), in a fixed order."""
    found = []
    for folder, dirs, files in os.walk(tree):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder, name)
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and info.st_size >= MIN_BYTES:
                found.append((path, info))
    return found


def sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def link_in_place(keep: Path, replace: Path) -> None:
    """Make `replace` a hard link to `keep`, atomically (a reader sees the old or the new file, never none)."""
    temporary = replace.with_name(f".{replace.name}.vlarl-link")
    os.link(keep, temporary)
    os.replace(temporary, replace)


def link_trees(trees: list[Path]) -> dict[str, int]:
    listed = [(rank, path, info) for rank, tree in enumerate(trees) for path, info in regular_files(tree)]
    by_size: dict[int, list[tuple[int, Path, os.stat_result]]] = defaultdict(list)
    for entry in listed:
        by_size[entry[2].st_size].append(entry)
    linked = saved = skipped = 0
    for same_size in by_size.values():
        if all(rank == 0 for rank, _, _ in same_size):
            continue  # only the first tree's files: it is never changed, so nothing to hash
        if len({(info.st_dev, info.st_ino) for _, _, info in same_size}) < 2:
            continue  # already one inode
        first: dict[tuple[str, int, int], tuple[Path, os.stat_result]] = {}
        digests: dict[tuple[int, int], str] = {}  # one hash per inode: linked copies are read once
        for rank, path, info in same_size:
            inode = (info.st_dev, info.st_ino)
            digest = digests[inode] = digests.get(inode) or sha256(path)
            key = (digest, stat.S_IMODE(info.st_mode), info.st_dev)
            if key not in first:
                first[key] = (path, info)
                continue
            keep, keep_info = first[key]
            if rank == 0 or keep_info.st_ino == info.st_ino:
                continue  # the first tree is never changed; already linked
            try:
                link_in_place(keep, path)
            except OSError:
                skipped += 1  # a read-only folder, a link limit: leave the copy
                continue
            linked += 1
            saved += info.st_size
    return {"files_linked": linked, "mib_saved": saved >> 20, "files_left": skipped}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=Path, help="the first is never changed")
    args = parser.parse_args()
    present = [tree for tree in args.trees if tree.is_dir()]
    result = link_trees(present)
    result["trees"] = [str(tree) for tree in present]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
