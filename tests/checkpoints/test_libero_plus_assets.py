"""`vlarl download Sylvest/LIBERO-plus --repo-type dataset --include assets.zip` against the loopback hub: a
tiny assets.zip in the upstream layout (every member under the build machine's long prefix, then ``assets/``
with the README's folders) is fetched through the hub API, verified, resumed, and installed where LIBERO-Plus's
environment reads it; then the light / background / layout suites are allowed. No LIBERO-Plus environment is
built here (its clone and mujoco 3 are not in CI): its provenance record and asset link are made by hand where
a test needs them."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from hub_server import HubServer, sha256

from vlarl_cli.envs.libero_plus import assets
from vlarl_cli.envs.libero_plus import suites as plus
from vlarl_cli.errors import EnvError, HubError

REPO = "Sylvest/LIBERO-plus"
#: what several public install scripts move into place after unzipping the real archive
PREFIX = "inspire/hdd/project/embodied-multimodality/public/syfei/libero_new/release/dataset/LIBERO-plus-0/assets/"
ARGS = (REPO, "--repo-type", "dataset", "--include", "assets.zip")


def upstream_zip(extra: dict[str, bytes] | None = None, prefix: str = PREFIX, drop: str = "") -> bytes:
    """A few files in each folder of the README's layout, under ``prefix``; stored, over 1 KiB (an LFS file)."""
    members = {f"{folder}/x/{folder}.xml": f"<mujoco model='{folder}'/>".encode() * 20
               for folder in assets.LAYOUT if "." not in folder}
    members.update({name: name.encode() * 10 for name in assets.LAYOUT if "." in name})
    members["scenes/libero_base_style.xml"] = b"<mujoco/>"
    members = {prefix + k: v for k, v in members.items() if not k.startswith(drop or "\0")}
    members.update(extra or {})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "vlarl-cache"
    monkeypatch.setenv("VLARL_CACHE", str(folder))
    return folder


def _download(run_download, cache: Path, *extra: str):
    return run_download(*ARGS, *extra, extra_env={"VLARL_CACHE": str(cache)})


def test_download_verifies_installs_and_then_the_asset_categories_run(hub: HubServer, run_download,
                                                                     cache: Path) -> None:
    archive = upstream_zip()
    hub.add_repo(REPO, {"assets.zip": archive, "README.md": b"card\n"}, repo_type="dataset")
    with pytest.raises(EnvError, match=r"libero_plus_goal_light: .*assets\.zip.*does not exist") as err:
        plus.check_runnable("libero_plus_goal_light")
    assert err.value.fix is not None and "vlarl download Sylvest/LIBERO-plus --repo-type dataset" in err.value.fix
    assert plus.expand("libero_plus_goal", None) == tuple(f"libero_plus_goal_{c}" for c in plus.RUNNABLE)
    assert "light, background, layout categories are left out" in str(plus.left_out(None))

    out = _download(run_download, cache)
    assert out.returncode == 0, out.stderr
    folder = cache / "libero_plus" / "assets"
    assert (folder / "scenes" / "libero_base_style.xml").read_bytes() == b"<mujoco/>"
    assert (folder / "wall.xml").read_bytes() == b"wall.xml" * 10 and not (folder / "inspire").exists()
    stamp = json.loads((folder / assets.STAMP).read_text())
    assert stamp["sha256"] == sha256(archive) and stamp["files"] == 11  # the sha256 the hub lists for the LFS file
    assert f"unpacking 11 files (0.0 GB) into {folder}" in out.stdout and f"unpacked 11 files into {folder}" in out.stdout
    assert "vlarl setup-sim libero_plus" in out.stdout  # no environment built: the command that links them
    assert not list(folder.parent.glob(".*tmp*"))  # nothing left of the temporary folder

    plus.check_runnable("libero_plus_goal_light")
    assert plus.expand("libero_plus_goal", None) == tuple(f"libero_plus_goal_{c.key}" for c in plus.catalog.CATEGORIES)
    assert plus.left_out(None) is None and len(plus.runnable_suite_names()) == 28

    hub.log.clear()
    again = _download(run_download, cache)
    assert again.returncode == 0 and "already installed" in again.stdout
    assert hub.served("cdn", "GET", "") == []  # nothing fetched again
    offline = run_download(*ARGS, extra_env={"VLARL_CACHE": str(cache), "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0 and "already installed" in offline.stdout  # the sha256 computed from the file


def test_a_corrupted_archive_is_refused_and_nothing_is_installed(hub: HubServer, run_download, cache: Path) -> None:
    hub.add_repo(REPO, {"assets.zip": upstream_zip()}, repo_type="dataset")
    hub.corrupt.add("assets.zip")
    out = _download(run_download, cache)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "assets.zip arrived corrupted" in out.stderr
    assert not (cache / "libero_plus").exists()


def test_an_interrupted_download_resumes_then_installs(hub: HubServer, run_download, cache: Path) -> None:
    archive = upstream_zip()
    hub.add_repo(REPO, {"assets.zip": archive}, repo_type="dataset")
    cut = len(archive) // 2
    hub.cut_at["assets.zip"] = cut
    out = _download(run_download, cache, "--retries", "0")
    assert out.returncode == 2 and "Run the same command again" in out.stderr
    assert not (cache / "libero_plus" / "assets").exists()
    del hub.cut_at["assets.zip"]
    hub.log.clear()
    out = _download(run_download, cache)
    assert out.returncode == 0, out.stderr
    assert [g.range for g in hub.served("cdn", "GET", "")] == [f"bytes={cut}-"]
    assert assets.installed() is not None and assets.installed().sha256 == sha256(archive)


def test_a_member_escaping_the_folder_is_refused(hub: HubServer, run_download, cache: Path) -> None:
    hub.add_repo(REPO, {"assets.zip": upstream_zip({PREFIX + "../../evil.txt": b"x"})}, repo_type="dataset")
    out = _download(run_download, cache)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "'..', '.' or empty path segment" in out.stderr and "unpacks nothing" in out.stderr
    assert not (cache / "libero_plus" / "assets").exists() and not list(cache.rglob("evil.txt"))


def test_a_built_environment_is_linked_to_the_installed_tree(hub: HubServer, run_download, cache: Path,
                                                             tmp_path: Path) -> None:
    """`vlarl setup-sim libero_plus` links LIBERO's own assets when assets.zip is absent; the download then
    points that link at the installed tree (a link of vlarl's, replaced; never a folder)."""
    from vlarl_cli.envs.libero_plus.install import NAME, PROVENANCE, assets_unusable

    source = tmp_path / "source"
    (source / "libero" / "libero").mkdir(parents=True)
    own = tmp_path / "libero-own-assets"
    own.mkdir()
    (source / "libero" / "libero" / "assets").symlink_to(own)
    record = cache / "sims" / NAME / PROVENANCE
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"commit": "4976dc3", "source": str(source), "assets": "LIBERO's own"}))
    hub.add_repo(REPO, {"assets.zip": upstream_zip()}, repo_type="dataset")
    out = _download(run_download, cache)
    assert out.returncode == 0, out.stderr
    link = source / "libero" / "libero" / "assets"
    assert link.is_symlink() and link.resolve() == (cache / "libero_plus" / "assets").resolve()
    assert own.is_dir() and "LIBERO-Plus's assets.zip" in json.loads(record.read_text())["assets"]
    assert assets_unusable() is None
    link.unlink()
    link.symlink_to(own)  # an environment reading another tree: the asset categories are refused, naming the fix
    with pytest.raises(EnvError, match=r"reads .*libero-own-assets.*vlarl setup-sim libero_plus"):
        plus.check_runnable("libero_plus_10_layout")


def _zip_file(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_install_refuses_what_it_must_not_replace(tmp_path: Path, cache: Path) -> None:
    """A tree from another archive, or a folder vlarl did not finish, is an error naming it; nothing deleted."""
    first = _zip_file(tmp_path, "a.zip", upstream_zip())
    assert assets.install(first).startswith("unpacked 11 files")
    assert assets.install(first).startswith("already installed")
    other = _zip_file(tmp_path, "b.zip", upstream_zip({PREFIX + "textures/extra.png": b"png"}))
    with pytest.raises(EnvError, match=r"already holds LIBERO-Plus assets from another archive") as err:
        assets.install(other)
    assert str(assets.assets_dir()) in str(err.value) and (assets.assets_dir() / "textures").is_dir()
    (assets.assets_dir() / assets.STAMP).unlink()  # as if an unpack by hand
    with pytest.raises(EnvError, match=r"is not a whole install by vlarl .*has no \.vlarl-libero-plus-assets"):
        assets.install(first)
    assert (assets.assets_dir() / "wall.xml").is_file()


def test_install_checks_the_layout_and_finds_the_assets_folder(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(HubError, match=r"unpacks no new_objects into assets/"):
        assets.install(_zip_file(tmp_path, "a.zip", upstream_zip(drop="new_objects")))
    assert not assets.assets_dir().exists() and not list(assets.assets_dir().parent.iterdir())
    with pytest.raises(HubError, match=r"no folder named assets holding all of its files"):
        assets.install(_zip_file(tmp_path, "b.zip", upstream_zip(prefix="LIBERO-plus-0/stuff/")))
    with pytest.raises(HubError, match=r"absolute or malformed name"):
        assets.install(_zip_file(tmp_path, "c.zip", upstream_zip({"/etc/evil": b"x"})))
    plain = _zip_file(tmp_path, "d.zip", upstream_zip(prefix="assets/"))  # the layout the README describes
    assert assets.install(plain).startswith("unpacked 11 files") and assets.installed() is not None


def test_setup_sim_links_the_installed_tree_and_never_replaces_a_folder(tmp_path: Path, cache: Path) -> None:
    """What `vlarl setup-sim libero_plus` links (install._assets_to_link / _link, the steps after pip)."""
    from vlarl_cli.envs.libero_plus import install

    assets.install(_zip_file(tmp_path, "a.zip", upstream_zip()))
    folder, what = install._assets_to_link()
    assert folder == assets.assets_dir() and f"sha256 {assets.installed().sha256}" in what
    link = tmp_path / "source" / "assets"
    link.parent.mkdir()
    install._link(link, folder)
    install._link(link, folder)  # again: the link replaced, nothing else
    assert link.resolve() == folder.resolve() and [p.name for p in link.parent.iterdir()] == ["assets"]
    link.unlink()
    link.mkdir()
    (link / "mine.xml").write_text("x")
    with pytest.raises(EnvError, match=r"is a folder, not vlarl's link"):
        install._link(link, folder)
    assert (link / "mine.xml").read_text() == "x"


def test_config_splits_accept_light_once_installed_and_refuse_layout(tmp_path: Path, cache: Path) -> None:
    """At config load: light is refused for its assets before the install and for its interpreter after it;
    layout (one init state per task) is refused as an env split, naming `vlarl eval`."""
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.errors import ConfigError

    light = ["env.train.task_suite_name=libero_plus_goal_light"]
    with pytest.raises(ConfigError, match=r"light tasks build scenes or objects from its assets\.zip"):
        load_config("libero_tiny_ppo", light)
    assets.install(_zip_file(tmp_path, "a.zip", upstream_zip()))
    with pytest.raises(ConfigError, match=r"runs only in LIBERO-Plus's own environment"):
        load_config("libero_tiny_ppo", light)
    with pytest.raises(ConfigError, match=r"one init state each .*vlarl eval --suite libero_plus_goal --categories "
                                          r"layout"):
        load_config("libero_tiny_ppo", ["env.train.task_suite_name=libero_plus_goal_layout"])


def test_libero_all_ids_do_not_move_when_assets_are_installed(tmp_path: Path, cache: Path) -> None:
    from vlarl_cli.envs.libero import suites as libero_suites

    before = libero_suites.all_suite_order()
    assert "libero_plus_goal_light" not in libero_suites.plus_suite_names()
    assets.install(_zip_file(tmp_path, "a.zip", upstream_zip()))
    assert libero_suites.all_suite_order() == before  # libero_all keeps the 16 asset-free LIBERO-Plus suites
    assert "libero_plus_goal_light" in libero_suites.plus_suite_names()
    assert libero_suites.check_suite("libero_plus_goal_light") == "libero_plus_goal_light"
