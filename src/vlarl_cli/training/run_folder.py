"""A run folder is a record nobody else can spoil: one owner at a time, and only vlarl's own files in it.

Every command that writes into a folder it keeps (``rl-train`` / ``sft`` into ``runner.logger.log_path``,
``eval`` into its results folder) first :func:`claim` s it:

* **One owner.** An exclusive ``fcntl.flock`` on ``<folder>/.vlarl.lock`` is held for the command's life.
  The kernel drops it on any exit (``kill -9`` included), so a stale lock file never blocks a later run.
  The owner writes its pid, host and command into the lock file; a second writer is refused (exit 2)
  naming them. Processes that a vlarl launcher started (``--nproc-per-node``) inherit the launcher's claim
  through :data:`OWNER_ENV`; only the launcher (node rank 0) and, under a bare ``torchrun``, global rank 0
  take the lock.
* **A new run never replaces an old one.** A folder that already holds a run (checkpoints or
  ``metrics.jsonl``) is refused without ``--resume``: continue it, or choose a new folder.
* **Only its own files.** ``.vlarl-run.json`` lists the files vlarl wrote there; :func:`write_own_text`
  refuses to replace a file it does not list (a user's own ``config.yaml``). A folder from before this
  manifest existed counts a ``config.yaml`` that parses as a vlarl config (``actor`` and ``runner`` keys)
  as vlarl's.
* **A history of configs.** A resumed run whose config differs from its checkpoint's records the changed
  keys (:func:`record_config_change`) in the manifest's ``config_history``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from vlarl_cli.errors import ConfigError

LOCK_FILE = ".vlarl.lock"
MANIFEST_FILE = ".vlarl-run.json"
#: the metric logs of rl-train and sft: a folder with a non-empty one holds a run
METRICS_FILES = ("metrics.jsonl", "sft_metrics.jsonl")
#: set by a vlarl launcher for the processes it starts: "<lock file>" whose claim they share
OWNER_ENV = "VLARL_RUN_FOLDER_OWNER"


class FolderInUse(ConfigError):
    """Another process holds the run folder's lock."""


def held_by_launcher(folder: Path) -> bool:
    """Whether this process was started by a vlarl launcher that holds ``folder``'s lock."""
    return os.environ.get(OWNER_ENV) == str((folder / LOCK_FILE).absolute())


@contextlib.contextmanager
def claim(folder: Path | str, *, command: str, resuming: bool = True, main: bool = True,
          what: str = "The run folder", writes: tuple[str, ...] = ("config.yaml",)) -> Iterator[Path]:
    """Hold ``folder`` for this command (see the module docstring); yields the folder.

    ``resuming=False``: a folder that already holds a run is refused. ``writes``: the files the command
    will write there, each refused up front when it exists and vlarl did not write it. ``main=False`` (a
    rank other than the owner's) checks nothing and locks nothing.
    """
    path = Path(folder).expanduser()
    if not main or held_by_launcher(path):
        yield path
        return

    def check() -> None:
        if not resuming:
            refuse_existing_run(path)
        for name in writes:
            check_own_file(path, name)

    if not (path / LOCK_FILE).exists():
        check()  # a refused folder gets no lock file of ours
    handle = _lock(path, command, what)  # a folder in use is refused as such, before what it holds is judged
    try:
        check()  # again under the lock: a run that started in between
        yield path
    finally:
        handle.close()  # closing the descriptor releases the flock


@contextlib.contextmanager
def shared_with_children(folder: Path | str) -> Iterator[None]:
    """Processes started inside this block (a relaunch) share this process's claim of ``folder``."""
    old = os.environ.get(OWNER_ENV)
    os.environ[OWNER_ENV] = str((Path(folder).expanduser() / LOCK_FILE).absolute())
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(OWNER_ENV, None)
        else:
            os.environ[OWNER_ENV] = old


def _lock(folder: Path, command: str, what: str) -> IO[str]:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX (Windows): no flock
        print(f"warning: {folder} cannot be locked on this system; nothing stops a second writer there.", flush=True)
        return open(os.devnull, encoding="utf-8")
    handle = open(folder / LOCK_FILE, "a+", encoding="utf-8")  # held (and so locked) for the run's life
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        handle.close()
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise FolderInUse(f"{what} {folder} is in use by {_owner(folder)}; two writers would mix their "
                              "metrics and overwrite each other's checkpoints.",
                              "Wait until that process ends (or stop it), or write to another folder.") from None
        if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):  # a file system without locks (some NFS)
            print(f"warning: {folder} cannot be locked ({err.strerror}); nothing stops a second writer there.",
                  flush=True)
            return open(os.devnull, encoding="utf-8")
        raise
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": f"vlarl {command}",
                             "since": time.strftime("%Y-%m-%d %H:%M:%S %z")}) + "\n")
    handle.flush()
    return handle


def _owner(folder: Path) -> str:
    try:
        info = json.loads((folder / LOCK_FILE).read_text(encoding="utf-8"))
        return f"`{info['command']}` (pid {info['pid']} on host {info['host']}, since {info['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its pid and host are not readable from the lock file)"


def holds_run(folder: Path) -> list[str]:
    """What in ``folder`` shows that it holds a run (checkpoints, metrics), empty when nothing does."""
    found = []
    checkpoints = folder / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        found.append("checkpoints/")
    found += [name for name in METRICS_FILES if (folder / name).is_file() and (folder / name).stat().st_size > 0]
    return found


def refuse_existing_run(folder: Path) -> None:
    taken = holds_run(folder)
    if not taken:
        return
    problem = (f"The run folder {folder} already holds a run ({', '.join(taken)}); starting a new run there would "
               "replace its checkpoints and mix its metrics.")
    if (folder / "checkpoints" / "latest").is_file():
        raise ConfigError(problem, "Continue it with --resume auto, or start the new run in another folder "
                          "(runner.logger.log_path=...); vlarl never replaces an earlier run.")
    raise ConfigError(problem + " It saved no checkpoint, so there is nothing to resume.",
                      "Start the new run in another folder (runner.logger.log_path=...), or move the old folder "
                      "away yourself; vlarl never deletes an earlier run.")


#: names that mark a folder as a record of a run: a training run, a training checkpoint, eval results
RECORD_MARKERS = (LOCK_FILE, MANIFEST_FILE, *METRICS_FILES, "trainer_state.json", "sft_state.json", "episodes.jsonl")


def _is_record(folder: str, name: str) -> bool:
    """A file that marks a run, a checkpoint, eval results, or demonstrations (vlarl's episode_*.npz, LIBERO's
    .hdf5 files, a LeRobot dataset's meta/info.json: hours of recording or a download)."""
    return (name in RECORD_MARKERS or (name.startswith("episode_") and name.endswith(".npz"))
            or name.endswith(".hdf5") or (name == "info.json" and Path(folder).name == "meta"))


def records_inside(folder: Path, *, limit: int = 100_000) -> list[Path]:
    """Up to three files under ``folder`` (itself included) that mark a run, a training checkpoint, eval
    results or demonstrations; looks at no more than ``limit`` entries (a huge folder counts as holding a
    record)."""
    found: list[Path] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        seen += len(dirnames) + len(filenames)
        found += [Path(dirpath) / n for n in filenames if _is_record(dirpath, n)]
        if len(found) >= 3:
            return found[:3]
        if seen > limit:
            return [*found, Path(dirpath) / f"... (more than {limit} entries, not all looked at)"]
    return found


# ---- the manifest of vlarl's own files


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST_FILE
    if not path.is_file():
        return {"files": [], "config_history": []}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} (vlarl's list of the files it wrote there) is damaged: {err}.",
                          "Restore it, or start the run in a new folder.") from None
    if not (isinstance(data, dict) and isinstance(data.get("files"), list)
            and isinstance(data.get("config_history", []), list)):
        raise ConfigError(f"{path} is not vlarl's list of its files.", "Restore it, or start the run in a new folder.")
    data.setdefault("config_history", [])
    return data


def _write_manifest(folder: Path, data: dict[str, Any]) -> None:
    from vlarl_cli.checkpoints.atomic import atomic_write_json

    atomic_write_json(folder / MANIFEST_FILE, data)


def _looks_like_vlarl_config(path: Path) -> bool:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and {"actor", "runner"} <= set(data)


def check_own_file(folder: Path, name: str) -> None:
    """Refuse when ``folder/name`` exists and vlarl did not write it."""
    path = folder / name
    if not (path.exists() or path.is_symlink()):
        return
    manifest = read_manifest(folder)
    legacy = not (folder / MANIFEST_FILE).is_file() and name == "config.yaml" and _looks_like_vlarl_config(path)
    if (name in manifest["files"] and path.is_file() and not path.is_symlink()) or legacy:
        return
    raise ConfigError(f"{path} exists and vlarl did not write it; vlarl would replace it.",
                      "Move that file away, or choose another folder (runner.logger.log_path=...).")


def write_own_text(folder: Path, name: str, text: str) -> Path:
    """Write ``folder/name`` atomically unless it is a file vlarl did not write; record it as vlarl's."""
    from vlarl_cli.checkpoints.atomic import atomic_write_text

    check_own_file(folder, name)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(folder)
    if name not in manifest["files"]:
        manifest["files"].append(name)
        _write_manifest(folder, manifest)
    return atomic_write_text(folder / name, text)


def record_config_change(folder: Path, *, iteration: int, changes: dict[str, tuple[Any, Any]]) -> None:
    """Append ``{iteration, changes: {key: [old, new]}}`` to the manifest's ``config_history``."""
    manifest = read_manifest(folder)
    manifest["config_history"].append({"iteration": iteration, "at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                                       "changes": {k: [old, new] for k, (old, new) in changes.items()}})
    _write_manifest(folder, manifest)


# ---- a resumed run's config against its checkpoint's

#: keys whose checkpointed value wins on resume (the optimizer's param groups, the weights' shapes, the random
#: streams): a changed value would be silently ignored, so it is refused instead. An entry ending in "." or "_"
#: is a prefix, the others are whole keys (actor.optim.lr_scheduler is read from the config: it applies)
RESUME_FROZEN = ("actor.model.", "actor.optim.lr", "actor.optim.value_lr", "actor.optim.adam_", "actor.optim.weight_decay",
                 "actor.seed")


def _frozen(key: str) -> bool:
    return any(key.startswith(f) if f.endswith((".", "_")) else key == f for f in RESUME_FROZEN)
#: keys that differ between a run's config and its checkpoint's by design (SFT saves model_path = the checkpoint)
RESUME_IGNORED = ("actor.model.model_path", "runner.resume_dir")


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix.removesuffix("."): tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


def config_changes(saved: dict[str, Any], now: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{key: (checkpoint's value, this run's value)}`` for the keys both configs have and that differ."""
    old, new = _flat(saved), _flat(now)
    return {k: (old[k], new[k]) for k in sorted(old.keys() & new.keys())
            if old[k] != new[k] and not k.startswith(RESUME_IGNORED)}


def _saved_config(checkpoint: Path) -> tuple[dict[str, Any], int]:
    import yaml

    from vlarl_cli.errors import CheckpointError

    fix = "Resume from another checkpoint of the run (see its checkpoints folder)."
    try:
        saved = yaml.safe_load((checkpoint / "config.yaml").read_text(encoding="utf-8"))
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        iteration = state["iteration"]
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as err:
        raise CheckpointError(f"Checkpoint {checkpoint}: its config.yaml or trainer_state.json cannot be read ({err}).",
                              fix) from None
    # a config that is not a mapping would compare as empty (every override let through); an iteration of -5,
    # 2.5 or 1e400 (JSON's inf) is no step a run reached
    if not isinstance(saved, dict):
        raise CheckpointError(f"Checkpoint {checkpoint}: its config.yaml holds a YAML {type(saved).__name__}, not "
                              "the run's config.", fix)
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise CheckpointError(f"Checkpoint {checkpoint}: its trainer_state.json gives iteration {iteration!r}, not a "
                              "step count (an integer >= 0).", fix)
    return saved, iteration


def check_resume_argument(resume: str | None) -> None:
    """``--resume ""`` (an unset shell variable) names no checkpoint: refused, where starting afresh would be a
    silent change of what the user meant."""
    if resume is not None and not resume.strip():
        raise ConfigError("--resume \"\" names no checkpoint.", "Pass --resume auto (the run's latest checkpoint) or "
                          "a checkpoint folder, or leave --resume out to start a new run.")


def check_resume_config(run_dir: Path, checkpoint: Path, config: Any, *, say: Any = print) -> dict[str, tuple[Any, Any]]:
    """Compare this run's config with the one saved in ``checkpoint``: a change to a key the checkpoint's state
    decides (:data:`RESUME_FROZEN`) is refused; every other change applies, is printed, and is recorded in
    the run's config history. Returns the applied changes."""
    saved, iteration = _saved_config(checkpoint)
    changes = config_changes(saved, config.model_dump(mode="json"))
    frozen = {k: v for k, v in changes.items() if _frozen(k)}
    if frozen:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in list(frozen.items())[:4])
        raise ConfigError(f"--resume continues the checkpoint {checkpoint}, whose saved state decides {listed} (the "
                          "optimizer's settings, the model's shapes, the random streams); the new value would be "
                          "ignored.",
                          "Drop that override to continue the run, or start a new run in a new folder.")
    if changes:
        say(f"resume with a changed config (recorded in {run_dir / MANIFEST_FILE}): "
            + "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items()))
        record_config_change(run_dir, iteration=iteration, changes=changes)
    return changes
