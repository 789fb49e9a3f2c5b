"""Reading orbax checkpoints (the ``params/`` item that openpi's JAX trainer writes) with tensorstore.

openpi's JAX trainer (``openpi/training/checkpoints.py``) saves each step through an orbax
``CheckpointManager``: ``<run>/<step>/`` holds ``_CHECKPOINT_METADATA`` (written last, with the commit
time), ``params/`` (the weights to serve; the EMA weights when the run kept an EMA), ``train_state/``
(optimizer state) and ``assets/<asset_id>/norm_stats.json``. The published openpi checkpoints have
``params/`` and ``assets/`` only. ``params/`` is an orbax PyTree item: ``_METADATA`` (JSON: the tree's key
paths) plus the arrays, each a zarr array inside one OCDBT key-value database (``manifest.ocdbt``,
``ocdbt.process_<i>/``) under the key ``<tree path joined by ".">``.

The arrays are read by tensorstore (the library orbax itself writes them with; the optional extra
``vlarl[openpi-jax]``, in the dev extras), never by a reader of our own: tensorstore lists the database's
keys and opens each array through its ``zarr`` driver over the ``ocdbt`` kvstore. ``_METADATA`` is read
to know which arrays a COMPLETE item holds: an item whose metadata or arrays are missing (a copy
stopped half-way, or a step orbax never committed: it writes under ``*.orbax-checkpoint-tmp-*`` and
renames on commit) is refused with :class:`~vlarl_cli.errors.CheckpointError`. Each array keeps its
stored dtype (float32 stays float32; bfloat16 arrives as ``ml_dtypes.bfloat16``).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlarl_cli.errors import CheckpointError

__all__ = ["OrbaxParams", "find_params_dir", "is_orbax_checkpoint", "open_params"]

_TMP_MARK = ".orbax-checkpoint-tmp"
_INSTALL = 'pip install "vlarl[openpi-jax]" (it adds tensorstore)'


def _looks_like_item(folder: Path) -> bool:
    return (folder / "_METADATA").is_file() or (folder / "manifest.ocdbt").is_file() or any(
        folder.glob("ocdbt.process_*"))


def find_params_dir(path: Path) -> Path | None:
    """The orbax ``params/`` item of ``path`` (a step folder holding ``params/``, or the item itself)."""
    if (path / "params").is_dir() and _looks_like_item(path / "params"):
        return path / "params"
    if path.name == "params" and _looks_like_item(path):
        return path
    return None


def _orbax_traces(path: Path) -> bool:
    """What orbax leaves in a step folder even when the save stopped: its metadata file or temporaries."""
    return (path / "_CHECKPOINT_METADATA").is_file() or any(_TMP_MARK in p.name for p in path.iterdir())


def is_orbax_checkpoint(path: Path) -> bool:
    """True when ``path`` is (or holds) an orbax ``params`` item, complete or not (cheap: file names)."""
    return path.is_dir() and (find_params_dir(path) is not None or _orbax_traces(path))


def _refuse_incomplete(params: Path, why: str) -> CheckpointError:
    return CheckpointError(
        f"{params} is an incomplete orbax checkpoint: {why}. orbax writes a step under a temporary name and "
        "renames it only when every array is written, so this is a copy or download that stopped half-way, "
        "or a step whose save never finished.",
        "Copy or download the checkpoint folder again (all of params/ and assets/), or pick an earlier step "
        "that the training run completed.")


def _expected_arrays(params: Path) -> list[tuple[str, ...]]:
    """Tree paths of the arrays the item's ``_METADATA`` lists (orbax's own record of what it wrote)."""
    meta_file = params / "_METADATA"
    if not meta_file.is_file():
        raise _refuse_incomplete(params, "its _METADATA file (the list of arrays orbax writes last) is missing")
    try:
        tree = json.loads(meta_file.read_text())["tree_metadata"]
        return [tuple(ast.literal_eval(key)) for key in tree]
    except (ValueError, KeyError, TypeError, SyntaxError) as err:
        raise _refuse_incomplete(params, f"its _METADATA file cannot be read ({err})") from None


def _tensorstore() -> Any:
    try:
        import tensorstore
    except ImportError:
        raise CheckpointError("Reading an openpi JAX (orbax) checkpoint needs the tensorstore package, which is "
                              "not installed.", f"Install it: {_INSTALL}.") from None
    return tensorstore


class OrbaxParams:
    """The arrays of one orbax ``params`` item: names (tree paths joined by ``/``, without orbax's leading
    ``params`` and nnx's trailing ``value``), shapes and dtypes from the zarr metadata, data on demand."""

    def __init__(self, params: Path) -> None:
        self.folder = params
        if any(_TMP_MARK in part for part in params.resolve().parts):
            raise _refuse_incomplete(params, f"it lies in an orbax temporary folder ({_TMP_MARK}*), a save that "
                                     "was never committed")
        expected = _expected_arrays(params)
        ts = _tensorstore()
        self._ts = ts
        base = {"driver": "ocdbt", "base": params.resolve().as_uri() + "/"}
        try:
            keys = ts.KvStore.open(base).result().list().result()
        except Exception as err:  # tensorstore raises ValueError / RuntimeError subclasses for bad databases
            raise _refuse_incomplete(params, f"its OCDBT database cannot be opened ({str(err).splitlines()[0]})"
                                     ) from None
        stored = {k.decode().split("/", 1)[0] for k in keys}
        missing = [".".join(path) for path in expected if ".".join(path) not in stored]
        if missing:
            raise _refuse_incomplete(params, f"{len(missing)} of its {len(expected)} arrays are not in the "
                                     f"database (e.g. {missing[0]})")
        self._base = base
        self._paths = {self._name(path): ".".join(path) for path in expected}

    @staticmethod
    def _name(path: tuple[str, ...]) -> str:
        parts = list(path)
        if parts and parts[0] == "params":
            parts = parts[1:]
        if parts and parts[-1] == "value":  # nnx.State leaves (openpi training checkpoints)
            parts = parts[:-1]
        return "/".join(parts)

    def names(self) -> list[str]:
        return sorted(self._paths)

    def _open(self, name: str) -> Any:
        spec = {"driver": "zarr", "kvstore": {**self._base, "path": self._paths[name] + "/"}}
        try:
            return self._ts.open(spec, open=True, read=True).result()
        except Exception as err:
            raise _refuse_incomplete(self.folder, f"array {name} cannot be opened ({str(err).splitlines()[0]})"
                                     ) from None

    def shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """``{name: (shape, numpy dtype name)}`` from the zarr metadata (no array data read)."""
        out = {}
        for name in self._paths:
            store = self._open(name)
            out[name] = (tuple(int(n) for n in store.shape), str(store.dtype.numpy_dtype))
        return out

    def read(self, name: str) -> Any:
        """One array as a numpy array of its stored dtype."""
        try:
            return self._open(name).read().result()
        except CheckpointError:
            raise
        except Exception as err:
            raise _refuse_incomplete(self.folder, f"array {name} cannot be read ({str(err).splitlines()[0]})"
                                     ) from None

    def items(self) -> Iterator[tuple[str, Any]]:
        for name in self.names():
            yield name, self.read(name)


def open_params(path: str | Path) -> OrbaxParams:
    """The params item of an openpi JAX checkpoint folder (step folder or ``params/``); CheckpointError
    when there is none or it is incomplete."""
    folder = Path(path).expanduser()
    params = find_params_dir(folder)
    if params is None and folder.is_dir() and _orbax_traces(folder):
        raise _refuse_incomplete(folder, "it has orbax's step metadata or temporary folders but no committed "
                                 "params/ item")
    if params is None:
        raise CheckpointError(f"{folder} holds no orbax params item (looked for params/_METADATA, "
                              "params/manifest.ocdbt).",
                              "Point at an openpi checkpoint step folder (<run>/<step>/, holding params/ and "
                              "assets/) or at its params/ folder.")
    return OrbaxParams(params)
