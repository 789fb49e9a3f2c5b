"""Install/setup checks: config without a prompt, GL backend choice, asset manifest, suites and init states.

No simulator is constructed here; a few tests read LIBERO's installed files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vlarl_cli.envs.libero import setup, suites
from vlarl_cli.errors import EnvError

pytestmark = pytest.mark.usefixtures("libero_ready")


def test_import_libero_without_prompt_writes_only_cache(tmp_path):
    cache = tmp_path / "cache"
    home = tmp_path / "home"
    home.mkdir()
    code = (
        "from pathlib import Path; import sys\n"
        "from vlarl_cli.envs.libero.setup import prepare_libero\n"
        f"p = prepare_libero(Path({str(cache)!r}))\n"
        "import libero.libero\n"
        "from libero.libero import get_libero_path\n"
        "print(get_libero_path('bddl_files'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LIBERO_CONFIG_PATH",)}
    env["HOME"] = str(home)  # LIBERO's fallback ~/.libero must not be used
    proc = subprocess.run(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("bddl_files")
    assert (cache / "libero" / "config.yaml").is_file()
    assert list(home.iterdir()) == []  # nothing written to ~/.libero


def test_config_yaml_keys(tmp_path):
    import yaml

    path = setup.write_libero_config(tmp_path, Path("/x/libero/libero"))
    config = yaml.safe_load(path.read_text())
    assert set(config) == {"benchmark_root", "bddl_files", "init_states", "datasets", "assets"}
    assert config["assets"] == "/x/libero/libero/assets"


def test_mujoco_gl_keeps_user_value(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    assert setup.choose_mujoco_gl() == "osmesa"


def test_mujoco_gl_error_names_packages(monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(setup, "_probe_backend", lambda backend: "cannot open display")
    with pytest.raises(EnvError) as info:
        setup.choose_mujoco_gl()
    message = str(info.value)
    for package in ("libegl1", "libegl-mesa0", "libgl1-mesa-dri", "libgbm1", "libosmesa6"):
        assert package in message


def test_mujoco_gl_probe_finds_a_backend(monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    assert setup.choose_mujoco_gl() in ("egl", "osmesa")


def test_installed_assets_match_manifest_with_hashes():
    assert setup.verify_assets(hashes=True) == len(setup.load_manifest()) > 500


def test_verify_assets_detects_missing_and_corrupt(tmp_path):
    real = setup.libero_package_dir() / "assets"
    manifest = setup.load_manifest()
    rels = sorted(manifest)
    corrupt, missing = rels[0], rels[1]
    for rel in rels:
        if rel == missing:
            continue
        dst = tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if rel == corrupt:  # same size, one byte flipped: only the hash can tell
            data = bytearray((real / rel).read_bytes())
            data[0] ^= 0xFF
            dst.write_bytes(bytes(data))
        else:
            dst.symlink_to(real / rel)
    with pytest.raises(EnvError, match=f"missing {missing}") as info:
        setup.verify_assets(tmp_path, hashes=False)
    assert "1 of" in str(info.value)
    (tmp_path / missing).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / missing).symlink_to(real / missing)
    assert setup.verify_assets(tmp_path, hashes=False) == len(manifest)  # sizes agree
    with pytest.raises(EnvError, match="sha256 differs"):
        setup.verify_assets(tmp_path, hashes=True)


def test_suites_sizes_and_libero_130():
    sizes = {s: len(suites.suite_tasks(s)) for s in suites.ALL_SUITES}
    assert sizes == {
        "libero_spatial": 10, "libero_object": 10, "libero_goal": 10, "libero_10": 10, "libero_90": 90,
        "libero_130": 130,
    }  # fmt: skip
    all_tasks = suites.suite_tasks("libero_130")
    assert len({(t.suite, t.name) for t in all_tasks}) == 130
    assert all(t.bddl_file.is_file() and t.init_states_file.is_file() for t in all_tasks)
    # libero_130 is the five suites in order: task 10 is libero_object task 0
    assert (all_tasks[10].suite, all_tasks[10].suite_task_id) == ("libero_object", 0)
    assert suites.suite_tasks("libero_spatial")[0].language == (
        "pick up the black bowl between the plate and the ramekin and place it on the plate"
    )


def test_unknown_suite_did_you_mean():
    with pytest.raises(EnvError, match='Did you mean "libero_goal"'):
        suites.suite_tasks("libero_gaol")


def test_address_round_trip():
    for suite in ("libero_spatial", "libero_130"):
        n = suites.num_tasks(suite) * suites.TRIALS_PER_TASK
        for rid in (0, 49, 50, n - 1):
            a = suites.address(suite, rid)
            assert suites.reset_state_id(suite, a.task_id, a.trial_id) == rid == a.reset_state_id
        with pytest.raises(EnvError, match="out of range"):
            suites.address(suite, n)
    assert suites.address("libero_130", 12 * 50 + 7) == suites.EpisodeAddress("libero_130", 12, 7)


@pytest.mark.parametrize(
    "suite", ["libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"]
)
def test_init_states_equal_libero(suite):
    from libero.libero import benchmark

    bench = benchmark.get_benchmark_dict()[suite](task_order_index=0)
    for task_id in (0, bench.get_num_tasks() - 1):
        ours = suites.init_states(suite, task_id)
        theirs = np.asarray(bench.get_task_init_states(task_id))
        assert ours.shape == theirs.shape and ours.shape[0] == 50
        np.testing.assert_array_equal(ours, theirs)
    # libero_130 addresses the same arrays
    # RLinf order: spatial, object, goal, 90, 10
    offset = {"libero_spatial": 0, "libero_object": 10, "libero_goal": 20, "libero_90": 30, "libero_10": 120}[
        suite
    ]
    np.testing.assert_array_equal(suites.init_states("libero_130", offset), suites.init_states(suite, 0))


def test_an_unknown_mujoco_gl_is_refused_naming_the_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before any env worker starts (each would otherwise die with MuJoCo's own traceback)."""
    from vlarl_cli.envs.libero.setup import choose_mujoco_gl
    from vlarl_cli.errors import EnvError

    monkeypatch.setenv("MUJOCO_GL", "nonsense")
    with pytest.raises(EnvError, match='MUJOCO_GL="nonsense" is not a MuJoCo rendering backend') as err:
        choose_mujoco_gl()
    assert "egl" in str(err.value.fix) and "osmesa" in str(err.value.fix)
