"""RLinf's digital-twin task ids at env creation: the missing hub assets are named with the command fetching
each (no Vulkan or mani_skill needed: the check runs before any simulator is built), and with the assets in
place the task is refused because it is RLinf's own code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlarl_cli.envs.maniskill.assets import digital_twin_assets, rlinf_assets_dir
from vlarl_cli.envs.maniskill.tasks import DIGITAL_TWIN_TASKS, check_task, check_task_id
from vlarl_cli.errors import EnvError


@pytest.fixture()
def asset_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MS_ASSET_DIR", str(tmp_path / "ms"))
    monkeypatch.delenv("MANISKILL_ASSET_DIR", raising=False)
    return tmp_path


def _fill(sets: list) -> None:
    for s in sets:
        for rel in s.required:
            (s.folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (s.folder / rel).write_text("{}")


def test_folders_follow_maniskill_and_rlinf(asset_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rlinf, bridge, widowx = digital_twin_assets()
    # mani_skill/__init__.py: ASSET_DIR = $MS_ASSET_DIR/data; base_env.py: ASSET_DIR/tasks/bridge_v2_real2sim_dataset
    assert bridge.folder == asset_dirs / "ms" / "data" / "tasks" / "bridge_v2_real2sim_dataset"
    assert widowx.folder == asset_dirs / "ms" / "data" / "robots" / "widowx"
    assert rlinf.folder == asset_dirs / "ms" / "data" / "rlinf_maniskill_assets"
    monkeypatch.setenv("MANISKILL_ASSET_DIR", str(asset_dirs / "mine"))  # RLinf's variable wins
    assert rlinf_assets_dir() == asset_dirs / "mine"


def test_missing_assets_name_the_download_commands(asset_dirs: Path) -> None:
    with pytest.raises(EnvError) as info:
        check_task("PutOnPlateInScene25Main-v3")
    text = f"{info.value.problem} {info.value.fix}"
    assert "vlarl download RLinf/maniskill_assets" in info.value.fix
    assert "vlarl download haosulab/ManiSkill_bridge_v2_real2sim" in info.value.fix
    assert "download_asset widowx250s" in info.value.fix
    assert str(asset_dirs / "ms" / "data" / "rlinf_maniskill_assets") in text
    assert "carrot/more_carrot/model_db.json" in text
    # only what is missing is named
    _, bridge, widowx = digital_twin_assets()
    _fill([bridge, widowx])
    with pytest.raises(EnvError) as info:
        check_task("PutOnPlateInScene25Main-v3")
    assert "vlarl download RLinf/maniskill_assets" in info.value.fix and "bridge" not in info.value.fix


def test_the_panda_twin_needs_its_table_not_the_widowx(asset_dirs: Path) -> None:
    names = [s.name for s in digital_twin_assets("PandaPutOnPlateInScene25DigitalTwin-v1")]
    assert any("RLCo-maniskill-assets" in n for n in names) and not any("WidowX" in n for n in names)
    with pytest.raises(EnvError) as info:
        check_task("PandaPutOnPlateInScene25DigitalTwin-v1")
    assert "custom_assets/bridge_table_long.glb" in info.value.problem
    assert "vlarl download RLinf/RLCo-maniskill-assets" in info.value.fix and "widowx250s" not in info.value.fix


def test_with_assets_in_place_the_task_is_refused_as_rlinf_code(asset_dirs: Path) -> None:
    _fill(digital_twin_assets() + digital_twin_assets("PandaPutOnPlateInScene25DigitalTwin-v1"))
    for task in DIGITAL_TWIN_TASKS:
        check_task_id(task)  # every RLinf id loads in a config
        with pytest.raises(EnvError, match="does not implement"):
            check_task(task)
    assert "cube" in check_task("PickCube-v1")
    with pytest.raises(EnvError, match='Did you mean "PutOnPlateInScene25Main-v3"'):
        check_task_id("PutOnPlateInScene25Main-v2")


def test_cli_exits_2_with_one_paragraph_when_assets_are_missing(tmp_path: Path) -> None:
    env = {**os.environ, "MS_ASSET_DIR": str(tmp_path / "ms"), "COLUMNS": "200", "NO_COLOR": "1",
           "OMP_NUM_THREADS": "1"}
    env.pop("MANISKILL_ASSET_DIR", None)
    out = subprocess.run([sys.executable, "-m", "vlarl_cli.cli.main", "rl-train", "--config",
                          "maniskill_pickcube_ppo_openpi", "env.train.init_params.id=PutOnPlateInScene25Main-v3",
                          "actor.model.model_path=null", f"runner.logger.log_path={tmp_path / 'run'}"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    error = out.stderr[out.stderr.index("error:"):]
    assert "PutOnPlateInScene25Main-v3" in error and "vlarl download RLinf/maniskill_assets" in error
    assert len(error.strip().splitlines()) == 2  # "error: <one paragraph>" and "fix: ..."
