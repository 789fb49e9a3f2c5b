"""``vlarl convert`` on openpi JAX (orbax) checkpoints that cannot be converted: one paragraph, exit 2,
nothing written. The checkpoint of another model is written by orbax's own PyTreeCheckpointer in the
reference environment (``upstream_orbax_other.py``: a PaliGemma-only tree, as openpi's pi0-FAST has); the
half-written ones are made from it by removing what an interrupted copy or save leaves out.
Command: ``pytest tests/conformance/openpi/test_openpi_jax_bad_inputs.py -q``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from openpi_ref import run_reference

from vlarl_cli.cli.main import run

NORM = {"norm_stats": {"state": {"mean": [0.0], "std": [1.0]}, "actions": {"mean": [0.0], "std": [1.0]}}}


@pytest.fixture(scope="module")
def other_model(openpi_python, tmp_path_factory) -> Path:
    folder: Path = tmp_path_factory.mktemp("orbax_other")
    try:
        run_reference(openpi_python, "upstream_orbax_other.py", {}, folder, timeout=300, argv=[str(folder)])
    except subprocess.TimeoutExpired:
        pytest.fail("orbax writer timed out")
    (folder / "assets" / "x" / "y").mkdir(parents=True)
    (folder / "assets" / "x" / "y" / "norm_stats.json").write_text(json.dumps(NORM))
    return folder


def _no_metadata(step: Path) -> None:
    (step / "params" / "_METADATA").unlink()


def _no_array_data(step: Path) -> None:
    for f in (step / "params").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.unlink()


def _uncommitted(step: Path) -> None:
    (step / "params").rename(step / "params.orbax-checkpoint-tmp-1795698133")
    (step / "_CHECKPOINT_METADATA").write_text("{}")


def _no_assets(step: Path) -> None:
    shutil.rmtree(step / "assets")


CASES: dict[str, tuple[Callable[[Path], None] | None, tuple[str, ...]]] = {
    "another model": (None, ("orbax checkpoint of another model", "pi0-FAST", "pi05_libero")),
    "no _METADATA": (_no_metadata, ("incomplete orbax checkpoint", "_METADATA", "again")),
    "array data missing": (_no_array_data, ("incomplete orbax checkpoint", "again")),
    "save never committed": (_uncommitted, ("incomplete orbax checkpoint", "no committed", "earlier step")),
    "no assets": (_no_assets, ("no normalisation statistics", "assets/<asset_id>/norm_stats.json")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_jax_checkpoint(name: str, other_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorstore")
    step = tmp_path / "step"
    shutil.copytree(other_model, step)
    damage, words = CASES[name]
    if damage is not None:
        damage(step)
    code = run(["convert", str(step), str(tmp_path / "out"), "--to", "vlarl"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and "\nfix: " in err and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    assert not (tmp_path / "out").exists()
