"""LIBERO-PRO and LIBERO-Plus catalogs: the counts and rules the benchmarks publish, and the bad-input paths.

The numbers asserted here were read off the benchmarks' own files (docs/benchmarks/libero_pro_plus.md):
LIBERO-Plus task_classification.json per suite and per category, LIBERO-PRO's 16 x 10 tasks with 50 init
states each. The cross-checks against the installed LIBERO read its bddl files as text (no simulator).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from vlarl_cli.envs.libero_plus import catalog as plus
from vlarl_cli.envs.libero_pro import catalog as pro
from vlarl_cli.errors import EnvError


def _libero_bddl_dir() -> Path | None:
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "libero" / "bddl_files"


def _bddl_language(path: Path) -> str:
    found = re.search(r"\(:language\s+(.*?)\)", path.read_text(), flags=re.S)
    assert found is not None, path
    return " ".join(found.group(1).lower().split())  # bddl.parsing.scan_tokens lowercases


def test_pro_has_sixteen_suites_of_ten_tasks_with_fifty_init_states() -> None:
    suites = pro.pro_suites()
    assert list(suites) == [f"{b}_{k}" for b in pro.BASE_SUITES for k in ("lan", "object", "swap", "task")]
    for suite in suites.values():
        assert len(suite.tasks) == 10 and suite.episodes == 500
        assert [t.task_id for t in suite.tasks] == list(range(10))
        assert all(task.init_shape[0] == 50 for task in suite.tasks)
    assert suites["libero_10_swap"].max_steps == 520 and suites["libero_spatial_lan"].max_steps == 220


def test_pro_init_states_have_the_base_scene_width() -> None:
    """Each PRO task's init states are flattened states of the same scene as LIBERO's task of that name
    (same width D), except where the perturbation adds or replaces objects (object, task may change D)."""
    bddl_dir = _libero_bddl_dir()
    if bddl_dir is None:
        pytest.skip("the libero package is not installed")
    import numpy as np
    import torch

    init_dir = bddl_dir.parent / "init_files"
    for suite in pro.pro_suites().values():
        for task in suite.tasks:
            base = np.asarray(torch.load(init_dir / suite.base_suite / f"{task.name}.pruned_init", weights_only=False))
            if suite.category.key in ("lan", "swap"):
                assert task.init_shape == base.shape, (suite.name, task.name)


def test_pro_instructions_follow_the_perturbation() -> None:
    """_lan and _task rewrite (:language); object and swap keep the base bddl's; task.language is the file name."""
    bddl_dir = _libero_bddl_dir()
    if bddl_dir is None:
        pytest.skip("the libero package is not installed")
    for suite in pro.pro_suites().values():
        for task in suite.tasks:
            base_name = task.name
            base = _bddl_language(bddl_dir / suite.base_suite / f"{base_name}.bddl")
            assert task.task_language == pro.language_from_name(task.name)
            if suite.category.key in ("object", "swap"):
                assert task.prompt("bddl") == base, (suite.name, task.name)
            elif suite.category.key == "lan":
                assert task.prompt("bddl") != base, (suite.name, task.name)
            assert task.prompt("task_name") == task.task_language


def test_pro_splits_and_their_errors() -> None:
    assert len(pro.resolve("libero_pro")) == 16
    assert [s.name for s in pro.resolve("libero_pro_goal", ["task", "lan"])] == ["libero_goal_lan", "libero_goal_task"]
    assert [s.name for s in pro.resolve("libero_object_swap")] == ["libero_object_swap"]
    with pytest.raises(EnvError, match=r'Unknown LIBERO-PRO split "libero_pro_long".*libero_pro_10'):
        pro.resolve("libero_pro_long")
    with pytest.raises(EnvError, match=r'"lang"\. Did you mean "lan"\?.*swap \(Position\)'):
        pro.resolve("libero_pro", ["lang"])
    with pytest.raises(EnvError, match=r'"libero_goal_swap" has no category lan; it has: swap'):
        pro.resolve("libero_goal_swap", ["lan"])


def test_plus_counts_match_task_classification() -> None:
    tasks = plus.plus_tasks()
    assert len(tasks) == plus.TOTAL_TASKS
    per_suite = {s: sum(t.suite == s for t in tasks) for s in plus.BASE_SUITES}
    assert per_suite == {"libero_spatial": 2402, "libero_object": 2518, "libero_goal": 2591, "libero_10": 2519}
    per_category = {c.key: sum(t.category == c.key for t in tasks) for c in plus.CATEGORIES}
    assert per_category == {"camera": 1599, "robot": 1550, "language": 1537, "light": 1142,
                            "background": 1076, "noise": 1601, "layout": 1525}
    for suite in plus.BASE_SUITES:
        assert [t.task_id for t in tasks if t.suite == suite] == list(range(per_suite[suite]))


def test_plus_task_names_decode_to_their_perturbation() -> None:
    by_category: dict[str, list[plus.PlusTask]] = {}
    for t in plus.plus_tasks():
        by_category.setdefault(t.category, []).append(t)
    # every camera / robot / noise task encodes a view; robot tasks move the robot, noise tasks blur
    assert all(t.camera is not None for k in ("camera", "robot", "noise") for t in by_category[k])
    assert all(t.robot_init > 0 for t in by_category["robot"])
    assert all(1 <= t.noise <= 50 for t in by_category["noise"])
    assert all(t.robot_init == 0 and t.noise == 0 for t in by_category["camera"])
    assert all(t.camera is None for k in ("light", "background", "layout") for t in by_category[k])
    long_task = next(t for t in by_category["noise"] if t.suite == "libero_10" and t.name.startswith("LIVING_ROOM"))
    assert not long_task.prompt().startswith("LIVING") and long_task.prompt().endswith(f"noise {long_task.noise}")
    assert "view" not in long_task.clean_instruction and "initstate" not in long_task.clean_instruction


def test_plus_splits_and_their_errors() -> None:
    goal_camera = plus.resolve("libero_plus_goal", ["camera"])
    assert len(goal_camera) == 408 and {t.suite for t in goal_camera} == {"libero_goal"}
    assert len(plus.resolve("libero_plus")) == plus.TOTAL_TASKS
    with pytest.raises(EnvError, match=r'Unknown LIBERO-Plus split "libero_plus_long".*libero_plus_10'):
        plus.resolve("libero_plus_long")
    with pytest.raises(EnvError, match=r'"lights"\. Did you mean "light"\?'):
        plus.resolve("libero_plus", ["lights"])
