"""The episode log of an evaluation: one JSON line per finished episode plus a small binary file per episode.

Layout of a results folder (``vlarl eval --out DIR``)::

    DIR/card.json                    the protocol card (every number in the folder was produced under it)
    DIR/episodes.jsonl               one line per finished episode (see :class:`EpisodeRecord`)
    DIR/episodes/<suite>/task<TT>_trial<KK>.npz
                                     what re-simulation needs: ``actions`` [K, C, 7] float32 (the chunks sent,
                                     exactly as sent), ``robot_states`` [K + 1, 8] float32 and
                                     ``joint_pos`` [K + 1, 7] float32 at every chunk boundary (a fingerprint
                                     the re-simulation is checked against)
    DIR/frames/<suite>/task<TT>_trial<KK>.npz
                                     live-recorded frames (only with ``--live-video``), lossless
    DIR/summary.json, DIR/summary.csv

Crash safety: the ``.npz`` is written atomically first, then the JSON line is appended with ONE
``write`` on an ``O_APPEND`` descriptor and fsynced. A line is therefore the commit record of its episode:
an episode without a line is re-run on resume, and a torn last line (a crash during the write) is cut off
by :meth:`EpisodeLog.repair` before anything is appended after it.

Why actions and not simulator states: the evaluation runs in the vector env's worker processes, which do
not expose simulator states; replaying the actions from the same init state, env seed and reset mode
reproduces the episode bit for bit (``tests/eval/test_eval_libero.py`` checks the frames), and the
chunk-boundary robot states let every re-simulation prove it did (REFERENCE.md section 1 warns that
replaying actions across *different* reset modes drifts).
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli.errors import VlarlError

CARD = "card.json"
EPISODES = "episodes.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"


class ResultsError(VlarlError):
    """A results folder or episode log is missing, malformed, or from an incompatible setup."""


@dataclass
class EpisodeRecord:
    """One finished evaluation episode (one line of ``episodes.jsonl``).

    Attributes:
        suite: the task's original suite (never ``libero_130``).
        task: task id inside ``suite``.
        trial: init state index (0..49).
        reset_state_id: ``task * 50 + trial`` inside ``suite``.
        task_name, language: LIBERO's task name and instruction.
        success: the episode reached the goal (``success_once``; episodes end at success).
        steps: policy steps executed (settle steps not counted).
        seed: ``env.seed`` applied before the reset.
        max_steps, settle_steps: the step limit and settle steps of this episode.
        error: why the episode failed abnormally ('' when it ran normally).
        rank: process that ran it.
        wall_s: seconds since the start of the run when the episode ended.
        data: ``.npz`` with actions and fingerprints, relative to the results folder.
        frames: ``.npz`` with live-recorded frames, relative to the results folder ('' when none).
    """

    suite: str
    task: int
    trial: int
    reset_state_id: int
    task_name: str
    language: str
    success: bool
    steps: int
    seed: int
    max_steps: int
    settle_steps: int
    error: str = ""
    rank: int = 0
    wall_s: float = 0.0
    data: str = ""
    frames: str = ""
    root: Path | None = field(default=None, compare=False, repr=False)  # folder the paths are relative to

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.suite, self.task, self.trial)

    @property
    def label(self) -> str:
        return f"{self.suite}_task{self.task:02d}_trial{self.trial:02d}"

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("root")
        return json.dumps(d, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any], root: Path | None = None) -> EpisodeRecord:
        names = {f for f in cls.__dataclass_fields__ if f != "root"}
        import dataclasses

        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        missing = required - d.keys()
        if missing:
            raise ResultsError(f"Episode line lacks {sorted(missing)}: {str(d)[:200]}",
                               "The file is not a vlarl episode log (episodes.jsonl from `vlarl eval`).")
        for f in dataclasses.fields(cls):
            if f.name in d and not _of_type(d[f.name], str(f.type)):
                raise ResultsError(f"Episode line has {f.name} = {str(d[f.name])[:80]!r}, not a {f.type}: "
                                   f"{str(d)[:200]}", "The file is not a vlarl episode log (episodes.jsonl from "
                                   "`vlarl eval`), or it was edited by hand.")
        return cls(**{k: v for k, v in d.items() if k in names}, root=root)

    def load_data(self) -> EpisodeData:
        if not self.data or self.root is None:
            raise ResultsError(f"Episode {self.label} has no recorded actions.",
                               "Re-run the evaluation with this version of vlarl.")
        from vlarl_cli.checkpoints.integrity import contained

        return EpisodeData.load(contained(self.root, self.data, f"Episode {self.label}'s data path"))

    def load_frames(self) -> dict[str, np.ndarray] | None:
        from vlarl_cli.checkpoints.integrity import contained

        if not self.frames or self.root is None:
            return None
        frames = contained(self.root, self.frames, f"Episode {self.label}'s frames path")
        if not frames.is_file():
            return None
        with np.load(frames) as f:
            return {k: f[k] for k in f.files}


def _of_type(value: Any, annotation: str) -> bool:
    """Whether a JSON value fits a field annotated ``str`` / ``int`` / ``bool`` / ``float`` (JSON has no int
    vs bool distinction that Python keeps: True is not an int here)."""
    if annotation == "bool":
        return isinstance(value, bool)
    if annotation == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation == "str":
        return isinstance(value, str)
    return True


@dataclass
class EpisodeData:
    """What re-simulation needs.

    Attributes:
        actions: ``[K, C, 7]`` float32, the K chunks sent to the env (steps after the end are not executed).
        robot_states: ``[K + 1, 8]`` float32 policy state (14 with ``obs_mode: state``) at the start and after every chunk.
        joint_pos: ``[K + 1, 7]`` float32 joint positions at the same points.
    """

    actions: np.ndarray
    robot_states: np.ndarray
    joint_pos: np.ndarray

    def save(self, path: Path) -> None:
        from vlarl_cli.checkpoints.atomic import atomic_write_bytes

        k = self.actions.shape[0]
        assert self.actions.ndim == 3 and self.actions.shape[2] == 7, self.actions.shape
        assert self.robot_states.shape[0] == k + 1 and self.robot_states.shape[1] in (8, 14), (self.robot_states.shape, k)
        buf = io.BytesIO()
        np.savez_compressed(buf, actions=self.actions.astype(np.float32, copy=False),
                            robot_states=self.robot_states, joint_pos=self.joint_pos)
        atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path: Path) -> EpisodeData:
        try:
            with np.load(path) as f:
                return cls(f["actions"], f["robot_states"], f["joint_pos"])
        except (OSError, KeyError, ValueError) as err:
            raise ResultsError(f"Cannot read episode data {path}: {err}",
                               "Re-run the evaluation of this episode (delete its line from episodes.jsonl "
                               "and run `vlarl eval` again with the same --out).") from None


def save_frames(path: Path, frames: dict[str, np.ndarray]) -> None:
    """Lossless frames ``{"main"|"wrist": [T, H, W, 3] uint8}``, written atomically."""
    from vlarl_cli.checkpoints.atomic import atomic_write_bytes

    buf = io.BytesIO()
    np.savez_compressed(buf, **frames)
    atomic_write_bytes(path, buf.getvalue())


def episode_paths(record_label: str, suite: str) -> tuple[str, str]:
    """Relative paths of an episode's data and frames files."""
    name = record_label.split(f"{suite}_", 1)[-1]
    return f"episodes/{suite}/{name}.npz", f"frames/{suite}/{name}.npz"


class EpisodeLog:
    """Append-only, crash-safe ``episodes.jsonl`` (see module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def repair(self) -> int:
        """Cut a torn last line (no trailing newline or not JSON); returns the bytes removed."""
        if not self.path.is_file():
            return 0
        data = self.path.read_bytes()
        keep = len(data)
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
        # a complete-looking last line can still be garbage if the write was torn inside a multi-byte char
        lines = data[:keep].splitlines(keepends=True)
        while lines:
            try:
                json.loads(lines[-1])
                break
            except ValueError:
                keep -= len(lines.pop())
        if keep != len(data):
            with open(self.path, "r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
        return len(data) - keep

    def read(self) -> list[EpisodeRecord]:
        """All complete records (a torn last line is ignored; a bad line elsewhere is an error)."""
        if not self.path.is_file():
            return []
        records = []
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise ResultsError(f"{self.path} is binary, not a text episode log (byte {err.start} is not UTF-8).",
                               "Pass the episodes.jsonl written by `vlarl eval`.") from None
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except ValueError:
                if i == len(lines) - 1:
                    break  # torn last line: the episode is simply not finished
                raise ResultsError(f"{self.path} line {i + 1} is not JSON.",
                                   "Delete that line; the episode will be evaluated again on resume.") from None
            if not isinstance(d, dict):
                raise ResultsError(f"{self.path} line {i + 1} is a JSON {type(d).__name__}, not an episode record "
                                   "(an object).", "The file is not a vlarl episode log; pass the episodes.jsonl "
                                   "written by `vlarl eval`, or delete that line.")
            records.append(EpisodeRecord.from_dict(d, root=self.path.parent))
        return records

    def append(self, record: EpisodeRecord) -> None:
        """Append one line with a single write on an O_APPEND descriptor, then fsync."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (record.to_json() + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            if written != len(line):  # pragma: no cover - a full disk
                raise OSError(f"short write to {self.path} ({written} of {len(line)} bytes)")
            os.fsync(fd)
        finally:
            os.close(fd)


def load_card(path: Path) -> dict[str, Any]:
    """The protocol card at ``path`` (a ``card.json``); a damaged one is a ResultsError naming the file."""
    try:
        card = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ResultsError(f"{path} is damaged (not a JSON protocol card: {str(err)[:120]}).",
                           "Restore it from a backup, or evaluate into a fresh folder (--out) or with --no-resume; "
                           "episodes.jsonl is not trusted without its card.") from None
    if not isinstance(card, dict):
        raise ResultsError(f"{path} is not a protocol card (a JSON {type(card).__name__}, not an object).",
                           "Evaluate into a fresh folder (--out) or with --no-resume.")
    return card


def read_episodes(path: Path) -> list[EpisodeRecord]:
    """Records of an ``episodes.jsonl`` (or of the results folder holding one)."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / EPISODES
    if not path.is_file():
        raise ResultsError(f"No episode log at {path}.",
                           "Pass the episodes.jsonl (or the results folder) written by `vlarl eval --out DIR`.")
    return EpisodeLog(path).read()


def unique_episodes(records: list[EpisodeRecord]) -> dict[tuple[str, int, int], EpisodeRecord]:
    """One record per (suite, task, trial): the first one written (later duplicates are ignored)."""
    out: dict[tuple[str, int, int], EpisodeRecord] = {}
    for r in records:
        out.setdefault(r.key, r)
    return out
