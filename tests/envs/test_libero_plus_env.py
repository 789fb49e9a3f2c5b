"""LIBERO-Plus tasks in LIBERO-Plus's own environment (`vlarl setup-sim libero_plus`: its `libero` package at
the catalog's commit, mujoco 3.3.7, Wand), stepped by vlarl's LIBERO worker. Real simulators, no mock.

The environment takes minutes to build and needs ImageMagick's library and a LIBERO-Plus clone; where it is
absent the simulator tests skip, naming the command. The checks without it (suite names, refusals) run always."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vlarl_cli import keys
from vlarl_cli.envs import interpreter
from vlarl_cli.envs.libero_plus import catalog
from vlarl_cli.envs.libero_plus import suites as plus
from vlarl_cli.errors import EnvError

pytestmark = pytest.mark.libero


def test_suites_are_base_by_category_and_the_asset_categories_are_refused_naming_assets_zip(tmp_path,
                                                                                           monkeypatch) -> None:
    monkeypatch.setenv("VLARL_CACHE", str(tmp_path))  # assets.zip not installed there
    assert len(plus.all_suite_names()) == 28 and len(plus.runnable_suite_names()) == 16
    counts = {c: sum(plus.num_tasks(plus.suite_name(b, c)) for b in catalog.BASE_SUITES) for c in plus.RUNNABLE}
    assert counts == {"camera": 1599, "robot": 1550, "language": 1537, "noise": 1601}  # the catalog's categories
    for category in ("light", "background", "layout"):
        with pytest.raises(EnvError, match=rf"libero_plus_goal_{category}: .*assets\.zip.*Sylvest/LIBERO-plus"):
            plus.check_runnable(f"libero_plus_goal_{category}")
    task = plus.tasks("libero_plus_goal_robot")[0]
    bddl, init = plus.files(task, plus.Path("/r"))
    assert bddl.name == f"{task.name}.bddl" and "_view_" in task.name and task.robot_init > 0
    assert init == plus.Path(f"/r/init_files/libero_goal/{task.name.split('_view_')[0]}.pruned_init")


def test_init_state_files_follow_libero_plus_get_task_init_states() -> None:
    """One task per branch of LIBERO-Plus's Benchmark.get_task_init_states (benchmark/__init__.py at 4976dc3),
    names from the catalog; the expected paths written out by hand from that code."""
    root = plus.Path("/r")
    by_name = {t.name: t for t in catalog.plus_tasks()}
    base = "pick_up_the_black_bowl_from_table_center_and_place_it_on_the_plate"
    folder = "/r/init_files/libero_spatial/"
    for name, expected in (
        (f"{base}_language_1_view_0_0_100_0_0_initstate_0", f"{base}.pruned_init"),
        (f"{base}_table_11", f"{base}.pruned_init"),
        (f"{base}_tb_1", f"{base}.pruned_init"),  # re.sub(_tb_\d+) leaves "_table_center" (no digits) alone
        (f"{base}_light_1", f"{base}.pruned_init"),
        (f"{base}_add_10", f"/r/init_files/libero_newobj/libero_spatial/{base}_add_10.pruned_init"),
        (f"{base}_level1_sample1", f"/r/init_files/libero_newobj/libero_spatial/{base}_level1_sample1.pruned_init"),
    ):
        assert name in by_name, name
        path = plus.init_states_file(by_name[name], root)
        assert str(path) == (expected if expected.startswith("/") else folder + expected), name


@pytest.fixture(scope="module")
def plus_python(libero_ready) -> str:
    if not interpreter.finished("libero_plus"):
        pytest.skip(f"no LIBERO-Plus environment at {interpreter.resolve('libero_plus')}: build it with "
                    "`vlarl setup-sim libero_plus` (VLARL_LIBERO_PLUS_SOURCE=<clone of sylvestf/LIBERO-plus>)")
    return "libero_plus"


def _first_obs(suite: str, python: str | None) -> dict:
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

    spec = VectorEnvSpec(suite=suite, task_ids=(0,), num_envs=1, num_workers=1, resolution=128,
                         init_state_order="ordered", python=python)
    with LiberoVectorEnv(spec) as vec:
        obs = vec.reset()
        _obs, _rewards, dones, infos = vec.step_chunk(np.zeros((1, 2, 7)))
        assert not dones.any() and infos[keys.ERRORS] == {}
    return obs


def test_a_camera_task_runs_in_libero_plus_and_its_camera_moved(plus_python: str) -> None:
    """libero_goal camera task 0 (`..._view_0_0_100_2_4_initstate_0`: the agent view turned 2 degrees about z and 4
    about y) from the base task's init state 0: LIBERO-Plus's instruction (suffix included), the wrist view equal
    to the unperturbed task's in vlarl's own LIBERO (same scene, same state, mujoco 3.3.7 vs 2.3.7), the agent
    view not."""
    task = plus.tasks("libero_plus_goal_camera")[0]
    assert task.camera == (0, 0, 1.0, 2, 4)
    theirs = _first_obs("libero_plus_goal_camera", plus_python)
    ours = _first_obs("libero_goal", None)  # the same scene and init state, unperturbed
    assert theirs[keys.TASK_DESCRIPTIONS] == [task.name.replace("_", " ")]
    main = np.abs(theirs[keys.MAIN_IMAGES].float() - ours[keys.MAIN_IMAGES].float()).mean().item()
    wrist = np.abs(theirs[keys.WRIST_IMAGES].float() - ours[keys.WRIST_IMAGES].float()).mean().item()
    assert main > 5 * max(wrist, 0.5), (main, wrist)


def test_configs_naming_plus_suites_are_checked_at_load_time(tmp_path, monkeypatch) -> None:
    """The simulator's own environment, the suite's category and the env_type are checked when the config loads
    (so --dry-run finds them), each in one sentence naming the fix."""
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.errors import ConfigError

    monkeypatch.setenv("VLARL_CACHE", str(tmp_path))  # no LIBERO-Plus environment built there
    for overrides, needle in (
        (["env.train.env_type=libero_plus"], 'runs LIBERO-Plus suites; "libero_spatial" is not one'),
        (["env.train.env_type=libero_plus", "env.train.task_suite_name=libero_plus_goal_camera"],
         "does not exist; build LIBERO-Plus's environment with `vlarl setup-sim libero_plus`"),
        (["env.train.task_suite_name=libero_plus_goal_camera"], "runs only in LIBERO-Plus's own environment"),
        (["env.train.task_suite_name=libero_plus_goal_light"], "light tasks build scenes or objects from its assets.zip"),
    ):
        with pytest.raises(ConfigError, match=re.escape(needle)):
            load_config("libero_tiny_ppo", overrides)


def test_every_runnable_task_finds_its_scene_and_init_states_in_the_environment(plus_python: str) -> None:
    """All 6,287 camera / robot / language / noise tasks: the bddl ControlEnv reads (the name before `_view_`)
    and the base task's init-state file are in the installed LIBERO-Plus files; `_language_` tasks take their
    instruction from their own bddl."""
    seen = 0
    for name in plus.runnable_suite_names():
        for info in plus.task_infos(name):
            scene = info.bddl_file.with_name(info.bddl_file.name.split("_view_")[0] + ".bddl")
            assert scene.is_file() and info.init_states_file.is_file(), info.name
            assert ("_language_" in info.name) == (" view " not in info.language), info.name
            seen += 1
    assert seen == 6287


def test_setup_sim_refuses_before_installing_anything_when_the_clone_or_magickwand_is_missing(
        capsys, tmp_path, monkeypatch) -> None:
    """What the build needs from outside the package index is checked first: no minutes of pip, then a refusal."""
    from vlarl_cli.cli.main import run
    from vlarl_cli.envs.libero_plus import install

    monkeypatch.setenv("VLARL_CACHE", str(tmp_path))
    monkeypatch.delenv(install.SOURCE_VAR, raising=False)
    for source in (None, tmp_path):  # unset, then a folder that is no clone
        if source is not None:
            monkeypatch.setenv(install.SOURCE_VAR, str(source))
        assert run(["setup-sim", "libero_plus"]) == 2
        text = " ".join(capsys.readouterr().err.split())
        try:
            install.check_magickwand()
        except EnvError:
            assert f"apt-get install {install.MAGICKWAND}" in text
        else:
            assert ("is not set" if source is None else "is not a git clone of LIBERO-Plus") in text
        assert not (tmp_path / "sims" / "libero_plus").exists()


def test_eval_of_a_plus_split_without_its_environment_is_refused_before_a_policy_is_loaded(
        capsys, tmp_path, monkeypatch) -> None:
    from vlarl_cli.cli.main import run

    monkeypatch.setenv("VLARL_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert run(["eval", "--suite", "libero_plus_goal", "--categories", "noise", "--config", "libero_tiny_ppo"]) == 2
    text = " ".join(capsys.readouterr().err.split())
    assert "LIBERO-Plus's simulator environment is not built" in text and "vlarl setup-sim libero_plus" in text
    assert not (tmp_path / "eval").exists()
