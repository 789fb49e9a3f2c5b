"""`vlarl download` of hub *dataset* repos: RLinf's ManiSkill assets (a tiny fake RLinf/maniskill_assets on
the loopback hub) land, verified like checkpoints, in the folder RLinf's task code reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hub_server import HubServer

ASSETS = "RLinf/maniskill_assets"


def asset_files() -> dict[str, bytes]:
    """RLinf's layout (put_on_in_scene_multi.py): carrot/more_{carrot,plate,table}; one LFS-sized image."""
    return {
        "carrot/more_carrot/model_db.json": json.dumps({"carrot_0": {"bbox": {"min": [0, 0, 0]}}}).encode(),
        "carrot/more_plate/model_db.json": b'{"plate_0": {}}',
        "carrot/more_table/model_db.json": b'{"table_0.png": {"texture": "t0.png", "mix": 0.5}}',
        "carrot/more_table/imgs/table_0.png": bytes(range(256)) * 8,  # >= 1024 B: served as LFS via the CDN
        "README.md": b"fake assets\n",
    }


@pytest.fixture
def asset_hub(hub: HubServer) -> HubServer:
    hub.add_repo(ASSETS, asset_files(), repo_type="dataset")
    return hub


def test_assets_land_verified_in_the_rlinf_folder(asset_hub: HubServer, run_download, tmp_path: Path) -> None:
    ms = tmp_path / "ms"
    out = run_download(ASSETS, extra_env={"MS_ASSET_DIR": str(ms)})
    assert out.returncode == 0, out.stderr
    folder = ms / "data" / "rlinf_maniskill_assets"
    for rel, data in asset_files().items():
        assert (folder / rel).read_bytes() == data
    assert "all verified" in out.stdout and f"export MANISKILL_ASSET_DIR={folder}" in out.stdout
    # the dataset API and dataset resolve URLs were used, the LFS file through the CDN
    assert asset_hub.served("hub", "GET", f"/api/datasets/{ASSETS}/revision/main")
    assert asset_hub.served("cdn", "GET", "") and not asset_hub.served("hub", "GET", f"/api/models/{ASSETS}")
    # a second run re-uses the verified files
    again = run_download(ASSETS, extra_env={"MS_ASSET_DIR": str(ms)})
    assert again.returncode == 0 and "0 bytes transferred" in again.stdout


def test_then_the_env_check_finds_them(asset_hub: HubServer, run_download, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from vlarl_cli.envs.maniskill.assets import rlinf_assets

    target = tmp_path / "mine"
    out = run_download(ASSETS, extra_env={"MANISKILL_ASSET_DIR": str(target), "MS_ASSET_DIR": str(tmp_path / "ms")})
    assert out.returncode == 0, out.stderr
    monkeypatch.setenv("MANISKILL_ASSET_DIR", str(target))
    assert rlinf_assets().missing() == []


def test_rlco_custom_assets_join_the_same_folder(hub: HubServer, run_download, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from vlarl_cli.envs.maniskill.assets import rlco_assets

    hub.add_repo("RLinf/RLCo-maniskill-assets", {"custom_assets/bridge_table_long.glb": b"glb" * 500,
                                                 "big_demo_data/a.bin": b"not wanted"}, repo_type="dataset")
    target = tmp_path / "mine"
    out = run_download("RLinf/RLCo-maniskill-assets", extra_env={"MANISKILL_ASSET_DIR": str(target),
                                                                 "MS_ASSET_DIR": str(tmp_path / "ms")})
    assert out.returncode == 0, out.stderr
    # only custom_assets/*, as RLinf's co-training docs fetch it
    assert (target / "custom_assets" / "bridge_table_long.glb").read_bytes() == b"glb" * 500
    assert not (target / "big_demo_data").exists()
    monkeypatch.setenv("MANISKILL_ASSET_DIR", str(target))
    assert rlco_assets().missing() == []


def test_a_corrupted_asset_is_refused_and_not_placed(asset_hub: HubServer, run_download, tmp_path: Path) -> None:
    asset_hub.corrupt.add("carrot/more_table/imgs/table_0.png")
    ms = tmp_path / "ms"
    out = run_download(ASSETS, extra_env={"MS_ASSET_DIR": str(ms)})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "table_0.png" in out.stderr
    assert not (ms / "data" / "rlinf_maniskill_assets" / "carrot/more_table/imgs/table_0.png").exists()


def test_repo_type_reaches_the_hub(asset_hub: HubServer, run_download, tmp_path: Path) -> None:
    # asked for as a model the loopback hub (like the real one) does not find the dataset
    out = run_download(ASSETS, "--repo-type", "model", extra_env={"MS_ASSET_DIR": str(tmp_path / "ms")})
    assert out.returncode == 2 and "not found" in out.stderr
    # any dataset repo into the hub cache: huggingface_hub's datasets--org--name layout
    asset_hub.add_repo("acme/tiny-data", {"a.txt": b"hello\n"}, repo_type="dataset")
    out = run_download("acme/tiny-data", "--repo-type", "dataset")
    assert out.returncode == 0, out.stderr
    snaps = list((tmp_path / "hf_home" / "hub" / "datasets--acme--tiny-data" / "snapshots").iterdir())
    assert (snaps[0] / "a.txt").read_bytes() == b"hello\n"
    out = run_download("acme/tiny-data", "--repo-type", "space")
    assert out.returncode == 2 and "--repo-type" in out.stderr


BRIDGE = "haosulab/ManiSkill_bridge_v2_real2sim"


def _zip(members: dict[str, bytes]) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_bridge_zip_is_unpacked_where_maniskill_reads_it(hub: HubServer, run_download, tmp_path: Path) -> None:
    # ManiSkill's zip has one top folder; its download_asset.py renames it to bridge_v2_real2sim_dataset
    glb = bytes(range(256)) * 5
    hub.add_repo(BRIDGE, {"bridge_v2_real2sim_dataset.zip": _zip({
        "bridge_v2_real2sim_dataset/stages/bridge_table_1_v1.glb": glb,
        "bridge_v2_real2sim_dataset/custom/info.json": b"{}"}), "README.md": b"x\n"}, repo_type="dataset")
    ms = tmp_path / "ms"
    out = run_download(BRIDGE, extra_env={"MS_ASSET_DIR": str(ms)})
    assert out.returncode == 0, out.stderr
    folder = ms / "data" / "tasks" / "bridge_v2_real2sim_dataset"
    assert (folder / "stages" / "bridge_table_1_v1.glb").read_bytes() == glb
    assert (folder / "custom" / "info.json").read_bytes() == b"{}"
    assert "unpacked 2 files" in out.stdout and "not the zip mani-skill 3.0.1 pins" in out.stdout
    assert not (ms / "data" / "tasks" / "README.md").exists()  # only the zip is fetched, into the hub cache
    again = run_download(BRIDGE, extra_env={"MS_ASSET_DIR": str(ms)})
    assert again.returncode == 0 and "already unpacked" in again.stdout


def test_a_zip_escaping_its_folder_is_refused(hub: HubServer, run_download, tmp_path: Path) -> None:
    hub.add_repo(BRIDGE, {"bridge_v2_real2sim_dataset.zip": _zip({"../evil.txt": b"x",
                                                                  "stages/bridge_table_1_v1.glb": b"g"})},
                 repo_type="dataset")
    ms = tmp_path / "ms"
    out = run_download(BRIDGE, extra_env={"MS_ASSET_DIR": str(ms)})
    assert out.returncode == 2 and "unsafe file name" in out.stderr and "Traceback" not in out.stderr
    assert not (ms / "data" / "tasks" / "bridge_v2_real2sim_dataset").exists()
    assert not (ms / "data" / "evil.txt").exists() and not (ms / "data" / "tasks" / "evil.txt").exists()
