"""The hub assets of RLinf's ManiSkill digital-twin tasks: which dataset repos, where they go, are they there.

What RLinf's task code reads (RLinf a3816b5, ``rlinf/envs/maniskill/tasks/put_on_in_scene_multi.py`` and
``panda_table_agent.py``), for ``PutOnPlateInScene25Main-v3`` and every other id it registers:

* ``RLinf/maniskill_assets`` (a hub *dataset* repo; RLinf's docs: ``hf download --repo-type dataset
  RLinf/maniskill_assets``): the carrots, plates and table overlays, read as
  ``$MANISKILL_ASSET_DIR/carrot/more_carrot/model_db.json``, ``carrot/more_plate/...``,
  ``carrot/more_table/{model_db.json,imgs,textures}``. RLinf's default for ``MANISKILL_ASSET_DIR`` is its
  own package folder ``rlinf/envs/maniskill/assets``; vlarl has no such folder, so its default is
  ``<ManiSkill data dir>/rlinf_maniskill_assets`` and it tells the user to export the variable.
* ManiSkill's ``bridge_v2_real2sim`` data source (the scene ``stages/bridge_table_1_v1.glb``), under
  ``mani_skill.ASSET_DIR / "tasks/bridge_v2_real2sim_dataset"``; ManiSkill's ``ASSET_DIR`` is
  ``$MS_ASSET_DIR/data`` (default ``~/.maniskill/data``). mani-skill 3.0.1 fetches it as one zip from the
  hub dataset ``haosulab/ManiSkill_bridge_v2_real2sim`` (``mani_skill/utils/assets/data.py``), with
  ``python -m mani_skill.utils.download_asset bridge_v2_real2sim``.
* ``RLinf/RLCo-maniskill-assets`` (hub dataset; RLinf's co-training docs download only its
  ``custom_assets/*`` into the same folder): ``custom_assets/bridge_table_long.glb``, the scene of
  ``PandaPutOnPlateInScene25DigitalTwin-v1`` (``panda_put_on_in_scene_multi.py`` CUSTOM_DATASET_PATH).
* the WidowX 250S robot description (``$MS_ASSET_DIR/data/robots/widowx/wx250s.urdf``), a GitHub archive
  (``download_asset widowx250s``), not a hub repo.

``vlarl download RLinf/maniskill_assets`` puts that plain file tree in place; ``vlarl download
haosulab/ManiSkill_bridge_v2_real2sim`` fetches the zip into the hub cache (verified like a checkpoint) and
unpacks it where ManiSkill looks, as ManiSkill's downloader does (``download_asset.py``: extract, then the
archive's one top folder becomes ``bridge_v2_real2sim_dataset``). The robot is fetched with ManiSkill's
command, which the missing-asset error names. Nothing heavy is imported here (no mani_skill): the folders
are computed the way ManiSkill computes them.
"""

from __future__ import annotations

import os
import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vlarl_cli.errors import EnvError, HubError

RLINF_ASSETS_REPO = "RLinf/maniskill_assets"
RLCO_ASSETS_REPO = "RLinf/RLCo-maniskill-assets"
BRIDGE_REPO = "haosulab/ManiSkill_bridge_v2_real2sim"
BRIDGE_ZIP = "bridge_v2_real2sim_dataset.zip"
#: mani-skill 3.0.1 utils/assets/data.py, DATA_SOURCES["bridge_v2_real2sim"].checksum (the zip ManiSkill expects)
MANISKILL_BRIDGE_SHA256 = "618512a205b4528cafecdad14b1788ed1130879f3064deb406516ed5b9c5ba92"
#: RLinf's variable for the folder holding ``carrot/...`` (put_on_in_scene_multi.py CARROT_DATASET_DIR)
RLINF_ASSET_ENV = "MANISKILL_ASSET_DIR"


def maniskill_data_dir() -> Path:
    """ManiSkill's ``ASSET_DIR``: ``$MS_ASSET_DIR/data``, default ``~/.maniskill/data`` (mani_skill/__init__.py)."""
    root = os.environ.get("MS_ASSET_DIR") or os.path.join(os.path.expanduser("~"), ".maniskill")
    return Path(root) / "data"


def rlinf_assets_dir() -> Path:
    """Where RLinf's task code finds ``RLinf/maniskill_assets``: ``$MANISKILL_ASSET_DIR``, else vlarl's default."""
    value = os.environ.get(RLINF_ASSET_ENV)
    return Path(value).expanduser() if value else maniskill_data_dir() / "rlinf_maniskill_assets"


@dataclass(frozen=True)
class AssetSet:
    """One set of files a digital-twin task needs: a folder and the files that show it is complete."""

    name: str
    folder: Path
    required: tuple[str, ...]
    command: str  # what fetches it

    def missing(self) -> list[str]:
        return [rel for rel in self.required if not (self.folder / rel).is_file()]


def rlinf_assets() -> AssetSet:
    folder = rlinf_assets_dir()
    return AssetSet(
        name=f"{RLINF_ASSETS_REPO} (hub dataset)", folder=folder,
        required=("carrot/more_carrot/model_db.json", "carrot/more_plate/model_db.json",
                  "carrot/more_table/model_db.json"),
        command=f"vlarl download {RLINF_ASSETS_REPO}")


def rlco_assets() -> AssetSet:
    return AssetSet(name=f"{RLCO_ASSETS_REPO} custom_assets (hub dataset)", folder=rlinf_assets_dir(),
                    required=("custom_assets/bridge_table_long.glb",), command=f"vlarl download {RLCO_ASSETS_REPO}")


def bridge_assets() -> AssetSet:
    return AssetSet(
        name="ManiSkill bridge_v2_real2sim (hub dataset haosulab/ManiSkill_bridge_v2_real2sim, a zip)",
        folder=maniskill_data_dir() / "tasks" / "bridge_v2_real2sim_dataset",
        required=("stages/bridge_table_1_v1.glb",),
        command=f"vlarl download {BRIDGE_REPO}")


def widowx_assets() -> AssetSet:
    return AssetSet(name="ManiSkill WidowX 250S robot (GitHub archive)",
                    folder=maniskill_data_dir() / "robots" / "widowx", required=("wx250s.urdf",),
                    command="python -m mani_skill.utils.download_asset widowx250s -y")


def digital_twin_assets(task: str = "PutOnPlateInScene25Main-v3") -> list[AssetSet]:
    """Everything one of RLinf's tasks reads: the WidowX ones (PutOnPlateInScene25*, PutCarrotOnPlateInScene-v2)
    the carrots, the bridge scene and the robot; the Panda one the carrots, its long table and the bridge data."""
    if task.startswith("Panda"):  # ManiSkill's own Panda ships inside the wheel
        return [rlinf_assets(), rlco_assets(), bridge_assets()]
    return [rlinf_assets(), bridge_assets(), widowx_assets()]


def check_assets(task: str) -> None:
    """One-paragraph :class:`EnvError` naming each missing asset set, its folder and the command fetching it."""
    missing = [(s, s.missing()) for s in digital_twin_assets(task)]
    missing = [(s, m) for s, m in missing if m]
    if not missing:
        return
    parts = [f"{s.name} in {s.folder} (missing {', '.join(m[:2])}{', ...' if len(m) > 2 else ''})"
             for s, m in missing]
    fixes = [s.command for s, _ in missing]
    env_note = (f" vlarl and RLinf's task code find {RLINF_ASSETS_REPO} through ${RLINF_ASSET_ENV} (now "
                f"{rlinf_assets_dir()}); MS_ASSET_DIR moves ManiSkill's own data folder.")
    raise EnvError(f'ManiSkill task "{task}" is one of RLinf\'s digital-twin scenes and its assets are not on '
                   f"this machine: {'; '.join(parts)}.{env_note}",
                   fix=f"Fetch them with: {'; '.join(fixes)}.")


def asset_download_dir(repo_id: str) -> Path | None:
    """The folder ``vlarl download <repo_id>`` fills with a known asset repo's tree (None: not such a repo)."""
    return rlinf_assets_dir() if repo_id in (RLINF_ASSETS_REPO, RLCO_ASSETS_REPO) else None


def asset_default_include(repo_id: str) -> list[str] | None:
    """What RLinf's docs fetch of a known asset repo when it is not the whole repo (None: everything)."""
    return ["custom_assets/*"] if repo_id == RLCO_ASSETS_REPO else None


def asset_archive(repo_id: str) -> tuple[str, AssetSet] | None:
    """``(zip in the repo, the asset set it unpacks to)`` for a known archive asset repo, else None."""
    return (BRIDGE_ZIP, bridge_assets()) if repo_id == BRIDGE_REPO else None


def _member_names(archive: zipfile.ZipFile) -> list[tuple[zipfile.ZipInfo, str]]:
    """Every file member with its checked relative name; one top folder shared by all is stripped."""
    from vlarl_cli.checkpoints.safety import check_relative_name

    files = []
    for info in archive.infolist():
        name = info.filename.rstrip("/")
        check_relative_name(name)  # absolute, '..', empty segments: HubError before anything is written
        if stat.S_ISLNK(info.external_attr >> 16):
            raise HubError(f"The archive holds a symbolic link ({info.filename}); vlarl does not unpack links.",
                           fix="The archive is not the one ManiSkill publishes; do not use it.")
        if not info.is_dir():
            files.append((info, name))
    tops = {name.split("/", 1)[0] for _, name in files}
    if len(tops) == 1 and all("/" in name for _, name in files):
        return [(info, name.split("/", 1)[1]) for info, name in files]
    return files


def unpack_archive(zip_path: Path, assets: AssetSet) -> str:
    """Unpack a verified asset zip into ``assets.folder`` (built under a temporary name, then moved in).
    Returns what happened, in words. An existing complete folder is kept; an incomplete one is an error
    (vlarl never deletes what the user did not ask it to)."""
    from vlarl_cli.checkpoints.atomic import atomic_directory
    from vlarl_cli.checkpoints.safety import safe_join

    if assets.folder.exists():
        if not assets.missing():
            return f"already unpacked in {assets.folder}"
        raise HubError(f"{assets.folder} exists but lacks {', '.join(assets.missing())}: an earlier unpack was "
                       "interrupted or the folder holds something else.",
                       fix=f"Move {assets.folder} away and run the same command again.")
    try:
        with zipfile.ZipFile(zip_path) as archive, atomic_directory(assets.folder, overwrite=False) as tmp:
            members = _member_names(archive)
            for info, name in members:
                target = safe_join(tmp, name)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            missing = [rel for rel in assets.required if rel not in {n for _, n in members}]
            if missing:  # the block fails, so the temporary folder is removed and nothing is placed
                raise HubError(f"{zip_path.name} does not contain {', '.join(missing)}, which ManiSkill reads.",
                               fix="The archive is not the one ManiSkill publishes; check the repository.")
    except zipfile.BadZipFile as err:
        raise HubError(f"{zip_path} is not a readable zip archive ({err}).",
                       fix="Download it again (delete the file first).") from None
    return f"unpacked {len(members)} files into {assets.folder}"
