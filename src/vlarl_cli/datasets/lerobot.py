"""LeRobot datasets (codebase v2.0 / v2.1 / v3.0) as demonstration episodes, and a v3.0 writer.

Layouts (facts from huggingface/lerobot ``src/lerobot/datasets/utils.py`` and
``scripts/convert_dataset_v21_to_v30.py``):

* every version: ``meta/info.json`` with ``codebase_version``, ``fps``, ``chunks_size``, ``features``
  (name -> ``{dtype, shape, names}``; ``dtype`` ``video`` / ``image`` for cameras), ``data_path`` and
  ``video_path`` templates. Frame rows carry the features plus ``timestamp``, ``frame_index``,
  ``episode_index``, ``index`` and ``task_index``.
* v2.0 / v2.1: ``meta/episodes.jsonl`` (``episode_index``, ``tasks``, ``length``), ``meta/tasks.jsonl``
  (``task_index``, ``task``), one parquet per episode
  ``data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet`` and one MP4 per episode and camera
  ``videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4``; stats in
  ``meta/episodes_stats.jsonl`` (v2.1) or ``meta/stats.json`` (v2.0).
* v3.0: episodes grouped into files ``data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet`` and
  ``videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4``; ``meta/tasks.parquet`` (the task
  string as the pandas index, column ``task_index``); ``meta/episodes/chunk-*/file-*.parquet`` with one row
  per episode: ``episode_index``, ``tasks``, ``length``, ``data/chunk_index``, ``data/file_index``,
  ``dataset_from_index``, ``dataset_to_index``, ``videos/<key>/{chunk_index, file_index, from_timestamp,
  to_timestamp}``; global stats in ``meta/stats.json``.
* ``image`` features are stored inside the parquet as ``{bytes, path}`` structs (PNG bytes).
* GR00T adds ``meta/modality.json``: ``state`` / ``action`` name -> ``{start, end, original_key?}`` slices
  of a column (default ``observation.state`` / ``action``), ``video`` name -> ``{original_key}``.

Which columns are the policy's state, action and cameras is resolved by :func:`resolve_keys` from common
names (openpi's LIBERO conversion: ``state`` / ``actions`` / ``image`` / ``wrist_image``; lerobot / GR00T:
``observation.state`` / ``action`` / ``observation.images.*``) or given explicitly (``sft.*_key``); an
ambiguous or missing choice is an error listing the dataset's features. Images are taken as stored: the
LIBERO conversions of openpi and GR00T store them already rotated by 180 degrees, as our env returns them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.checkpoints.integrity import contained
from vlarl_cli.datasets.video import decode_frames, encode_frames, frames_at
from vlarl_cli.errors import VlarlError

__all__ = ["INFO_PATH", "DatasetKeys", "is_lerobot_dataset", "read_info", "read_lerobot", "resolve_keys",
           "write_lerobot"]

INFO_PATH = "meta/info.json"
SUPPORTED = ("v2.0", "v2.1", "v3.0")
_STATE_NAMES = ("observation.state", "state", "observation.states")
_ACTION_NAMES = ("action", "actions")
_MAIN_NAMES = ("observation.images.image", "image", "observation.images.agentview", "observation.images.front",
               "observation.image", "agentview_image", "observation.images.agentview_image")
# lerobot's own LIBERO datasets and env name the eye-in-hand camera "image2" (lerobot src/lerobot/envs/libero.py
# camera_name_mapping: agentview_image -> image, robot0_eye_in_hand_image -> image2)
_WRIST_NAMES = ("observation.images.wrist_image", "wrist_image", "observation.images.wrist",
                "observation.images.eye_in_hand", "robot0_eye_in_hand_image", "observation.images.wrist_image_left",
                "observation.images.image2")
_FIX_KEYS = "Name the columns with sft.state_key / sft.action_key / sft.main_camera_key / sft.wrist_camera_key."


@dataclass(frozen=True)
class DatasetKeys:
    """The dataset columns that become the episode's state, action and cameras (``None``: no such camera).

    ``state_slices`` / ``action_slices``: GR00T ``modality.json`` parts ``(column, start, end)`` concatenated
    in order; empty means the whole ``state`` / ``action`` column.
    """

    state: str
    action: str
    main_camera: str | None
    wrist_camera: str | None
    state_slices: tuple[tuple[str, int, int], ...] = ()
    action_slices: tuple[tuple[str, int, int], ...] = ()


def is_lerobot_dataset(path: Path) -> bool:
    return (Path(path) / INFO_PATH).is_file()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise VlarlError(f"Cannot read {path}: {err}", "Check that the LeRobot dataset is complete.") from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as err:
        raise VlarlError(f"Cannot read {path}: {err}", "Check that the LeRobot dataset is complete.") from None


def _rows(path: Path, fields: dict[str, type]) -> list[dict[str, Any]]:
    """The rows of a metadata .jsonl file, each an object holding ``fields`` of their types (an int field may
    not be a bool); a row that does not is named with its line."""
    rows = _read_jsonl(path)
    for line, row in enumerate(rows, 1):
        bad = [k for k, kind in fields.items() if not isinstance(row, dict) or not isinstance(row.get(k), kind)
               or (kind is int and isinstance(row.get(k), bool))]
        if bad:
            shown = json.dumps(row)[:120]
            want = ", ".join(f"{k} ({fields[k].__name__})" for k in bad)
            raise VlarlError(f"{path}: row {line} ({shown}) lacks {want}.",
                             "Check that the LeRobot dataset is complete (re-download its meta/ folder).")
    return rows


def _template(root: Path, info: dict[str, Any], key: str, **fields: Any) -> str:
    """``info[key]`` (data_path, video_path) filled with ``fields``; a template that is not a string or names
    another field is named."""
    template = info.get(key)
    try:
        if not isinstance(template, str):
            raise TypeError(f"not a string: {template!r}")
        return template.format(**fields)
    except (KeyError, IndexError, ValueError, TypeError) as err:
        raise VlarlError(f"{root / INFO_PATH}: {key} {str(template)[:120]!r} cannot be filled in ({type(err).__name__}: "
                         f"{err}); it may use {', '.join('{' + f + '}' for f in fields)}.",
                         "Fix meta/info.json (or re-download the dataset).") from None


def read_info(root: Path) -> dict[str, Any]:
    info = _read_json(Path(root) / INFO_PATH)
    if not isinstance(info, dict):
        raise VlarlError(f"{Path(root) / INFO_PATH} holds a JSON {type(info).__name__}, not the dataset's info "
                         "object.", "Check that the LeRobot dataset is complete (re-download meta/info.json).")
    version = str(info.get("codebase_version", ""))
    if version not in SUPPORTED:
        raise VlarlError(f"LeRobot dataset {root} has codebase_version {version!r}; vlarl reads "
                         f"{', '.join(SUPPORTED)}.", "Convert it with lerobot's conversion scripts "
                         "(e.g. lerobot.scripts.convert_dataset_v21_to_v30).")
    for field in ("fps", "features", "data_path"):
        if field not in info:
            raise VlarlError(f"{root / INFO_PATH} has no {field!r}.", "Check that the dataset is complete.")
    chunks = info.get("chunks_size", 1000)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise VlarlError(f"{root / INFO_PATH} gives chunks_size {chunks!r}; it must be a positive integer.",
                         "Fix meta/info.json's chunks_size (lerobot writes 1000).")
    fps = info["fps"]
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not 0 < fps < float("inf"):
        raise VlarlError(f"{root / INFO_PATH} gives fps {fps!r}; frames per second must be a positive number.",
                         "Fix meta/info.json's fps (the rate the episodes were recorded at).")
    return info


def _pick(features: dict[str, Any], given: str | None, names: Sequence[str], what: str, root: Path,
          *, required: bool, cameras: bool = False) -> str | None:
    if given is not None:
        if given not in features:
            raise VlarlError(f'LeRobot dataset {root} has no feature "{given}" for the {what} (features: '
                             f"{sorted(features)}).", _FIX_KEYS)
        return given
    found = [n for n in names if n in features]
    if cameras:
        found = [n for n in found if features[n].get("dtype") in ("video", "image")]
    if len(found) > 1:
        raise VlarlError(f"LeRobot dataset {root}: several features could be the {what}: {found}.", _FIX_KEYS)
    if not found and required:
        raise VlarlError(f"LeRobot dataset {root}: no feature looks like the {what} (looked for {list(names)}; "
                         f"features: {sorted(features)}).", _FIX_KEYS)
    return found[0] if found else None


def _modality_slices(modality: dict[str, Any], kind: str, default: str) -> tuple[tuple[str, int, int], ...]:
    parts = modality.get(kind) or {}
    return tuple((str(v.get("original_key", default)), int(v["start"]), int(v["end"])) for v in parts.values())


def resolve_keys(root: Path, info: dict[str, Any], *, state_key: str | None = None, action_key: str | None = None,
                 main_camera_key: str | None = None, wrist_camera_key: str | None = None) -> DatasetKeys:
    """Choose the state / action / camera columns (explicit names win, then GR00T's ``modality.json``,
    then the common names); errors list the dataset's features."""
    features = info["features"]
    modality_file = Path(root) / "meta" / "modality.json"
    modality = _read_json(modality_file) if modality_file.is_file() else {}
    if not isinstance(modality, dict) or not all(isinstance(v, dict) for v in modality.values()):
        raise VlarlError(f"{modality_file} is not GR00T's modality map (an object of state / action / video objects).",
                         "Fix or remove meta/modality.json, or name the columns with sft.state_key / sft.action_key.")
    videos = {k: v.get("original_key", f"observation.images.{k}") for k, v in (modality.get("video") or {}).items()}
    main_default = next((videos[k] for k in ("image", "agentview", "front") if k in videos), None)
    wrist_default = next((videos[k] for k in ("wrist_image", "wrist", "eye_in_hand") if k in videos), None)
    state = _pick(features, state_key, _STATE_NAMES, "state", root, required=True)
    action = _pick(features, action_key, _ACTION_NAMES, "action", root, required=True)
    main = _pick(features, main_camera_key or main_default, _MAIN_NAMES, "main camera", root, required=False,
                 cameras=True)
    wrist = _pick(features, wrist_camera_key or wrist_default, _WRIST_NAMES, "wrist camera", root, required=False,
                  cameras=True)
    state_slices = () if state_key else _modality_slices(modality, "state", "observation.state")
    action_slices = () if action_key else _modality_slices(modality, "action", "action")
    for col, _, _ in state_slices + action_slices:
        if col not in features:
            raise VlarlError(f'{modality_file} slices column "{col}", which {root} does not have.', _FIX_KEYS)
    assert state is not None and action is not None
    return DatasetKeys(state, action, main, wrist, state_slices, action_slices)


# ------------------------------------------------------------------------------------------------ reading


def _vectors(table: Any, name: str, where: str) -> np.ndarray:
    """A list / fixed-size-list / scalar column -> float32 ``[T, D]``."""
    if name not in table.column_names:
        raise VlarlError(f"{where} has no column {name!r} (columns: {table.column_names}).",
                         "Check meta/info.json features against the parquet files.")
    rows = table.column(name).to_pylist()
    try:
        arr = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as err:  # strings, nulls, ragged lists: not a numeric column
        raise VlarlError(f"{where}: column {name!r} is not a numeric vector per frame ({err}; first value "
                         f"{str(rows[0])[:80] if rows else None!r}).",
                         "Check the dataset's parquet files against meta/info.json (or choose another column "
                         "with sft.state_key / sft.action_key).") from None
    return arr[:, None] if arr.ndim == 1 else arr.reshape(len(rows), -1)


def _sliced(table: Any, column: str, slices: tuple[tuple[str, int, int], ...], where: str) -> np.ndarray:
    if not slices:
        return _vectors(table, column, where)
    return np.concatenate([_vectors(table, col, where)[:, a:b] for col, a, b in slices], axis=1)


def _decode_image_column(table: Any, name: str, root: Path) -> np.ndarray:
    from io import BytesIO

    from PIL import Image

    if name not in table.column_names:
        raise VlarlError(f"LeRobot dataset {root}: a data file has no image column {name!r} (columns: "
                         f"{table.column_names}), though meta/info.json lists it.",
                         "Check meta/info.json features against the parquet files.")
    out = []
    for cell in table.column(name).to_pylist():
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if not data and isinstance(cell, dict) and cell.get("path"):
            data = contained(root, cell["path"], f"Image column {name!r}").read_bytes()
        if not data:
            raise VlarlError(f"Image column {name!r} of {root} has an empty cell.", "Re-export the dataset.")
        out.append(np.asarray(Image.open(BytesIO(data)).convert("RGB"), dtype=np.uint8))
    return np.stack(out)


def _episode_video(table: Any, ref: _EpisodeRef, col: str, where: str) -> np.ndarray:
    """The frames of camera ``col`` at the episode's timestamps (v3.0: only its window of the file is decoded)."""
    window = ref.video_windows[col]
    frames, times = decode_frames(ref.video_files[col], *(window or (None, None)))
    ts = np.asarray(table.column("timestamp").to_pylist(), np.float64) + (window[0] if window else 0.0)
    return frames_at(frames, times, ts, where=f"{where} camera {col}")


@dataclass
class _EpisodeRef:
    index: int
    data_file: Path
    video_files: dict[str, Path]
    video_windows: dict[str, tuple[float, float] | None]  # v3.0: (from, to) seconds in the file; v2: whole file
    success: bool = True  # vlarl's own recordings mark kept failures ("vlarl/success"); others are demonstrations


def _episode_refs_v2(root: Path, info: dict[str, Any], cams: Sequence[str]) -> list[_EpisodeRef]:
    episodes_file = root / "meta" / "episodes.jsonl"
    if not episodes_file.is_file():
        raise VlarlError(f"{episodes_file} is missing.", "A v2.x LeRobot dataset lists its episodes there.")
    chunk_size = int(info.get("chunks_size", 1000))
    refs = []
    for row in sorted(_rows(episodes_file, {"episode_index": int}), key=lambda r: r["episode_index"]):
        ep = int(row["episode_index"])
        chunk = ep // chunk_size
        data = contained(root, _template(root, info, "data_path", episode_chunk=chunk, episode_index=ep), "data_path")
        videos = {c: contained(root, _template(root, info, "video_path", episode_chunk=chunk, video_key=c,
                                               episode_index=ep), "video_path") for c in cams}
        refs.append(_EpisodeRef(ep, data, videos, dict.fromkeys(cams)))
    return refs


def _read_parquet(path: Path) -> Any:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise VlarlError(f"Parquet file {path} is missing.", "Check that the LeRobot dataset is complete.")
    try:
        return pq.read_table(path)
    except Exception as err:  # pyarrow raises ArrowInvalid / OSError subclasses for corrupt files
        raise VlarlError(f"Cannot read parquet file {path}: {err}", "Re-download the dataset.") from None


def _episode_refs_v3(root: Path, info: dict[str, Any], cams: Sequence[str]) -> list[_EpisodeRef]:
    import pyarrow as pa

    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not files:
        raise VlarlError(f"{root / 'meta' / 'episodes'} has no chunk-*/file-*.parquet.",
                         "A v3.0 LeRobot dataset lists its episodes there.")
    table = pa.concat_tables([_read_parquet(f) for f in files], promote_options="default")
    rows = table.to_pylist()
    needed = ["episode_index", "data/chunk_index", "data/file_index"] + [
        f"videos/{c}/{k}" for c in cams for k in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    missing = [k for k in needed if k not in table.column_names]
    if missing:
        raise VlarlError(f"{root / 'meta' / 'episodes'}: the episode tables lack the columns {missing}.",
                         "Check that the LeRobot v3.0 dataset is complete (re-download its meta/ folder).")
    refs = []
    for row in sorted(rows, key=lambda r: r["episode_index"]):
        data = contained(root, _template(root, info, "data_path", chunk_index=row["data/chunk_index"],
                                         file_index=row["data/file_index"]), "data_path")
        videos: dict[str, Path] = {}
        windows: dict[str, tuple[float, float] | None] = {}
        for c in cams:
            videos[c] = contained(root, _template(root, info, "video_path", video_key=c,
                                                  chunk_index=row[f"videos/{c}/chunk_index"],
                                                  file_index=row[f"videos/{c}/file_index"]), "video_path")
            windows[c] = (float(row[f"videos/{c}/from_timestamp"]), float(row[f"videos/{c}/to_timestamp"]))
        refs.append(_EpisodeRef(int(row["episode_index"]), data, videos, windows, bool(row.get("vlarl/success", True))))
    return refs


def _tasks(root: Path, version: str) -> dict[int, str]:
    jsonl = root / "meta" / "tasks.jsonl"
    if version.startswith("v2") or (not (root / "meta" / "tasks.parquet").is_file() and jsonl.is_file()):
        return {int(r["task_index"]): str(r["task"]) for r in _rows(jsonl, {"task_index": int, "task": str})}
    table = _read_parquet(root / "meta" / "tasks.parquet")
    # pandas writes its named index ("task") as a column; an unnamed one as __index_level_0__
    name = next((n for n in ("task", "__index_level_0__") if n in table.column_names), None)
    if name is None:
        raise VlarlError(f"{root / 'meta' / 'tasks.parquet'} has no task column ({table.column_names}).",
                         "Re-export the dataset with lerobot.")
    return {int(i): str(t) for i, t in zip(table.column("task_index").to_pylist(), table.column(name).to_pylist(),
                                           strict=True)}


def read_lerobot(root: str | Path, *, state_key: str | None = None, action_key: str | None = None,
                 main_camera_key: str | None = None, wrist_camera_key: str | None = None,
                 episodes: Sequence[int] | None = None) -> list[Any]:
    """The episodes of a LeRobot dataset as :class:`vlarl_cli.training.demos.Episode` objects.

    ``episodes`` restricts to these episode indices. The columns are chosen by :func:`resolve_keys`. Each
    episode must have one task (its frames' ``task_index``); its description becomes the instruction.
    """
    import pyarrow.compute as pc

    from vlarl_cli.datasets.episodes import Episode

    root = Path(root).expanduser()
    info = read_info(root)
    version = info["codebase_version"]
    k = resolve_keys(root, info, state_key=state_key, action_key=action_key, main_camera_key=main_camera_key,
                     wrist_camera_key=wrist_camera_key)
    cams: dict[str, str] = {ours: col for ours, col in ((keys.MAIN_IMAGES, k.main_camera),
                                                        (keys.WRIST_IMAGES, k.wrist_camera)) if col is not None}
    video_cols = [c for c in cams.values() if info["features"][c]["dtype"] == "video"]
    refs = (_episode_refs_v2 if version.startswith("v2") else _episode_refs_v3)(root, info, video_cols)
    if episodes is not None:
        wanted = set(int(e) for e in episodes)
        refs = [r for r in refs if r.index in wanted]
    tasks = _tasks(root, version)
    tables: dict[Path, Any] = {}
    out = []
    for ref in refs:
        where = f"{root} episode {ref.index}"
        if ref.data_file not in tables:
            tables = {ref.data_file: _read_parquet(ref.data_file)}  # v3 files hold consecutive episodes
        table = tables[ref.data_file]
        table = table.filter(pc.equal(table.column("episode_index"), ref.index))
        if table.num_rows == 0:
            raise VlarlError(f"{where}: no rows in {ref.data_file}.", "Check meta/episodes against data/.")
        table = table.sort_by("frame_index") if "frame_index" in table.column_names else table
        task_ids = sorted(set(table.column("task_index").to_pylist()))
        if len(task_ids) != 1:
            raise VlarlError(f"{where} has {len(task_ids)} tasks ({task_ids}); vlarl trains on one instruction "
                             "per episode.", "Split the episode or pick episodes with one task.")
        if task_ids[0] not in tasks:
            raise VlarlError(f"{where}: task_index {task_ids[0]} is not in the dataset's task table.",
                             "Check meta/tasks.")
        images = {}
        for ours, col in cams.items():
            if info["features"][col]["dtype"] == "image":
                images[ours] = _decode_image_column(table, col, root)
            else:
                images[ours] = _episode_video(table, ref, col, where)
        ep = Episode(states=_sliced(table, k.state, k.state_slices, where),
                     actions=_sliced(table, k.action, k.action_slices, where),
                     task_description=tasks[task_ids[0]], success=ref.success, images=images,
                     meta={"source": "lerobot", "codebase_version": version, "episode_index": ref.index})
        ep.validate(where)
        out.append(ep)
    if not out:
        raise VlarlError(f"LeRobot dataset {root} has no episodes{' among ' + str(list(episodes)) if episodes else ''}.",
                         "Point --demos at a dataset with episodes.")
    return out


# ------------------------------------------------------------------------------------------------ writing


def _feature(dtype: str, shape: Sequence[int], names: Any) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape), "names": names}


def _tasks_table(tasks: Sequence[str]) -> Any:
    """``meta/tasks.parquet`` as lerobot writes it: a pandas DataFrame with column ``task_index``, indexed by
    the task string (lerobot ``datasets/utils.py`` ``write_tasks``; its reader takes ``tasks.iloc[i].name``
    as the task). Without pandas here, the index is the column ``__index_level_0__`` plus the ``pandas``
    schema metadata that makes ``pandas.read_parquet`` restore it (Arrow's pandas metadata spec)."""
    import pyarrow as pa

    index = "__index_level_0__"
    pandas_meta = {
        "index_columns": [index],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
                     "metadata": None},
                    {"name": None, "field_name": index, "pandas_type": "unicode", "numpy_type": "object",
                     "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.3",
    }
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), index: pa.array(list(tasks), pa.string())})
    return table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})


def write_lerobot(root: str | Path, episodes: Sequence[Any], *, fps: int = 20, robot_type: str = "panda",
                  codec: str = "libsvtav1", extra_meta: dict[str, Any] | None = None) -> Path:
    """Write ``episodes`` (:class:`~vlarl_cli.training.demos.Episode`) as a LeRobot v3.0 dataset at ``root``.

    One data file, one video file per camera and one episodes file (fine for the few hundred episodes
    recorded here); columns ``observation.state``, ``action``, ``observation.images.image`` /
    ``observation.images.wrist_image`` (the GR00T / lerobot LIBERO names), plus the bookkeeping columns;
    ``meta/stats.json`` holds min / max / mean / std / count per numeric feature (and q01 / q99), and per
    camera the per-channel [3, 1, 1] statistics of its pixels in [0, 1] that lerobot keeps. The folder
    must not exist yet (written under a temporary name, renamed at the end). ``extra_meta``: file name ->
    JSON content written into ``meta/`` as well (e.g. how the episodes were recorded).
    """
    import pyarrow.parquet as pq

    from vlarl_cli.checkpoints.atomic import atomic_directory

    root = Path(root).expanduser()
    if root.exists():
        raise VlarlError(f"{root} already exists; a LeRobot dataset is written into a new folder.",
                         "Choose a new folder or move the old one away.")
    if not episodes:
        raise VlarlError("No episodes to write.", "Record some first.")
    tasks = sorted({e.task_description for e in episodes})
    lengths = [len(e) for e in episodes]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    data, features, stats = _frame_columns(episodes, lengths, starts, tasks, fps)
    with atomic_directory(root, overwrite=False) as tmp:
        ep_rows = _episode_rows(episodes, lengths, starts)
        for cam, col in _CAMERA_COLUMNS.items():
            if cam in episodes[0].images:
                _write_camera(tmp, col, np.concatenate([e.images[cam] for e in episodes]), fps, codec,
                              starts, features, stats, ep_rows)
        (tmp / "data" / "chunk-000").mkdir(parents=True)
        pq.write_table(data, tmp / "data" / "chunk-000" / "file-000.parquet")
        (tmp / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
        pq.write_table(_pa().table(ep_rows), tmp / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
        pq.write_table(_tasks_table(tasks), tmp / "meta" / "tasks.parquet")
        info = {"codebase_version": "v3.0", "robot_type": robot_type, "total_episodes": len(episodes),
                "total_frames": int(starts[-1]), "total_tasks": len(tasks), "chunks_size": 1000,
                "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": fps,
                "splits": {"train": f"0:{len(episodes)}"},
                "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
                "features": features}
        (tmp / "meta" / "info.json").write_text(json.dumps(info, indent=2))
        (tmp / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
        for name, content in (extra_meta or {}).items():
            (tmp / "meta" / name).write_text(json.dumps(content, indent=2))
    return root


#: vlarl's camera keys -> LeRobot's columns (the GR00T / lerobot LIBERO names), in the order they are written
_CAMERA_COLUMNS = {keys.MAIN_IMAGES: "observation.images.image", keys.WRIST_IMAGES: "observation.images.wrist_image"}


def _pa() -> Any:
    import pyarrow as pa

    return pa


def _frame_columns(episodes: Sequence[Any], lengths: list[int], starts: np.ndarray, tasks: list[str],
                   fps: int) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The data file's table (one row per frame), the non-camera features and their statistics."""
    from vlarl_cli.datasets.stats import feature_stats

    pa = _pa()
    task_index = {t: i for i, t in enumerate(tasks)}
    states = np.concatenate([e.states for e in episodes]).astype(np.float32)
    actions = np.concatenate([e.actions for e in episodes]).astype(np.float32)
    frame_index = np.concatenate([np.arange(n) for n in lengths])
    data = {
        "observation.state": pa.array(list(states), type=pa.list_(pa.float32(), states.shape[1])),
        "action": pa.array(list(actions), type=pa.list_(pa.float32(), actions.shape[1])),
        "timestamp": pa.array((frame_index / fps).astype(np.float32)),
        "frame_index": pa.array(frame_index.astype(np.int64)),
        "episode_index": pa.array(np.repeat(np.arange(len(episodes)), lengths).astype(np.int64)),
        "index": pa.array(np.arange(int(starts[-1]), dtype=np.int64)),
        "task_index": pa.array(np.repeat([task_index[e.task_description] for e in episodes], lengths).astype(np.int64)),
    }
    features: dict[str, Any] = {
        "observation.state": _feature("float32", [states.shape[1]], None),
        "action": _feature("float32", [actions.shape[1]], None),
        "timestamp": _feature("float32", [1], None), "frame_index": _feature("int64", [1], None),
        "episode_index": _feature("int64", [1], None), "index": _feature("int64", [1], None),
        "task_index": _feature("int64", [1], None),
    }
    stats = {"observation.state": feature_stats(states), "action": feature_stats(actions)}
    return pa.table(data), features, stats


def _episode_rows(episodes: Sequence[Any], lengths: list[int], starts: np.ndarray) -> dict[str, list[Any]]:
    """The episodes file's columns (the cameras' columns are added by :func:`_write_camera`)."""
    n = len(episodes)
    return {"episode_index": list(range(n)), "tasks": [[e.task_description] for e in episodes], "length": lengths,
            "data/chunk_index": [0] * n, "data/file_index": [0] * n,
            "dataset_from_index": starts[:-1].tolist(), "dataset_to_index": starts[1:].tolist(),
            "vlarl/success": [bool(e.success) for e in episodes]}


def _write_camera(tmp: Path, col: str, frames: np.ndarray, fps: int, codec: str, starts: np.ndarray,
                  features: dict[str, Any], stats: dict[str, Any], ep_rows: dict[str, list[Any]]) -> None:
    """One camera's video file, its feature, its per-channel pixel statistics and its episode columns."""
    from vlarl_cli.datasets.stats import image_stats

    n = len(starts) - 1
    encode_frames(tmp / "videos" / col / "chunk-000" / "file-000.mp4", frames, fps, codec=codec)
    stats[col] = image_stats(frames)
    h, w = frames.shape[1:3]
    features[col] = {**_feature("video", [int(h), int(w), 3], ["height", "width", "channels"]),
                     "info": {"video.fps": fps, "video.codec": codec.removeprefix("lib").replace("svtav1", "av1"),
                              "video.pix_fmt": "yuv420p", "video.height": int(h), "video.width": int(w),
                              "video.channels": 3, "has_audio": False}}
    ep_rows[f"videos/{col}/chunk_index"] = [0] * n
    ep_rows[f"videos/{col}/file_index"] = [0] * n
    ep_rows[f"videos/{col}/from_timestamp"] = (starts[:-1] / fps).tolist()
    ep_rows[f"videos/{col}/to_timestamp"] = (starts[1:] / fps).tolist()
