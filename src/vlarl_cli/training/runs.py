"""What ``vlarl eval`` and ``vlarl video`` take when no checkpoint or episode log is named: the newest.

Layout written by ``vlarl rl-train`` / ``vlarl sft`` (:mod:`vlarl_cli.training.checkpoint`,
:mod:`vlarl_cli.training.validate`) and ``vlarl eval`` (:mod:`vlarl_cli.training.evaluation.api`)::

    runs/<run>/checkpoints/global_step_<k>/      weights + config.yaml, renamed into place when complete
    runs/<run>/checkpoints/latest                the name of the checkpoint saved last
    runs/<run>/eval/iter_<k>/episodes.jsonl      rl-train's evaluations
    eval/<name>/<suite>_<protocol>/episodes.jsonl   vlarl eval's results (its default --out)

``runs`` is the schema's default ``runner.logger.log_path`` and the parent of every preset's
(``runs/<preset>``). A run is a folder holding ``checkpoints/``: ``runs`` itself or a folder up to two
levels below it. Its newest checkpoint is the one ``latest`` names (the last one saved), else the highest
step; the newest run is the one whose newest checkpoint was written last.
"""

from __future__ import annotations

from pathlib import Path

from vlarl_cli.config.schema import LoggerConfig
from vlarl_cli.errors import CheckpointError, ConfigError

__all__ = ["EVALS", "RUNS", "choose_checkpoint", "newest_checkpoint", "newest_episodes", "run_folders"]

RUNS = Path(LoggerConfig.model_fields["log_path"].default)
EVALS = Path("eval")
_STEP_PREFIX = "global_step_"


def _step(folder: Path) -> int:
    tail = folder.name.removeprefix(_STEP_PREFIX)
    return int(tail) if tail.isdigit() else -1


def checkpoints_of(run: Path) -> list[Path]:
    """The complete checkpoint folders of ``run`` (those holding config.yaml), lowest step first."""
    folder = run / "checkpoints"
    found = [p for p in folder.glob(f"{_STEP_PREFIX}*") if _step(p) >= 0 and (p / "config.yaml").is_file()]
    return sorted(found, key=_step)


def newest_checkpoint(run: Path) -> Path | None:
    """The checkpoint ``run/checkpoints/latest`` names when it is complete, else the highest step; None
    when the run has none."""
    from vlarl_cli.checkpoints.integrity import follow_latest
    from vlarl_cli.training.checkpoint import LATEST

    found = checkpoints_of(run)
    pointer = run / "checkpoints" / LATEST
    if pointer.is_file():
        named = follow_latest(pointer.parent)  # a binary or escaping pointer is named, not a UnicodeDecodeError
        if named in found:
            return named
    return found[-1] if found else None


def run_folders(root: Path = RUNS) -> list[Path]:
    """Folders at most two levels under ``root`` (and ``root`` itself) that hold ``checkpoints/``."""
    candidates = [root, *root.glob("*"), *root.glob("*/*")]
    return sorted(p for p in candidates if (p / "checkpoints").is_dir())


def _written_at(checkpoint: Path) -> int:
    return (checkpoint / "config.yaml").stat().st_mtime_ns


def choose_checkpoint(run: Path | None = None, root: Path = RUNS) -> Path:
    """The newest checkpoint of ``run``, or of the newest run under ``root``; an error naming how to get
    one when there is none."""
    if run is not None:
        chosen = newest_checkpoint(Path(run).expanduser())
        if chosen is None:
            raise CheckpointError(f"The run folder {run} holds no checkpoint (no checkpoints/{_STEP_PREFIX}<k> "
                                  "with a config.yaml).",
                                  "Pass the folder that `vlarl rl-train` or `vlarl sft` wrote (its "
                                  "runner.logger.log_path), or a checkpoint with --checkpoint PATH.")
        return chosen
    newest = [c for c in map(newest_checkpoint, run_folders(root)) if c is not None]
    if not newest:
        raise ConfigError(f"Nothing to evaluate: no --checkpoint or --config was given, and no run under "
                          f"{root}/ (in {Path.cwd()}) holds a checkpoint.",
                          "Train one first, e.g. `vlarl rl-train --config quickstart` (it saves "
                          "runs/quickstart/checkpoints/...), or pass --checkpoint PATH (a checkpoint or run "
                          "folder), --run DIR, or --config with a model.")
    return max(newest, key=lambda c: (_written_at(c), str(c)))


def newest_episodes(roots: tuple[Path, ...] = (EVALS, RUNS)) -> Path:
    """The episode log written last under ``eval/`` (vlarl eval's results) or ``runs/`` (rl-train's
    evaluations); an error naming ``vlarl eval`` when there is none."""
    from vlarl_cli.video.episodes import EPISODES, ResultsError

    patterns = (f"*/{EPISODES}", f"*/*/{EPISODES}", f"*/eval/*/{EPISODES}", f"eval/*/{EPISODES}")
    found = {p for root in roots for pattern in patterns for p in root.glob(pattern) if p.is_file()}
    if not found:
        raise ResultsError(f"Nothing to render: no episodes file was given and no evaluation under "
                           f"{' or '.join(f'{r}/' for r in roots)} (in {Path.cwd()}) has written one.",
                           "Evaluate first (`vlarl eval --suite libero_10`, which takes the newest checkpoint "
                           "under runs/), or pass an episodes.jsonl, or --checkpoint/--config for a live "
                           "rollout.")
    return max(found, key=lambda p: (p.stat().st_mtime_ns, str(p)))
