"""User-facing errors.

Every failure a user can cause ends in one clear message that names the problem and the fix
(DESIGN.md). Library code raises :class:`VlarlError` (or a subclass); the CLI prints it as one
paragraph and exits with code 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class VlarlError(Exception):
    """An error caused by user input, with the fix attached.

    Args:
        problem: what is wrong, naming the offending value.
        fix: what the user should do about it (optional but strongly encouraged).
    """

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem} Fix: {fix}")


class ConfigError(VlarlError):
    """The configuration is invalid (bad key, bad type, broken cross-field rule, missing file)."""


class CheckpointError(VlarlError):
    """A checkpoint is missing, malformed, or does not match the model."""


class HubError(VlarlError):
    """Talking to the model hub failed (offline, gated, missing repository)."""


class EnvError(VlarlError):
    """The simulator cannot be set up or was given bad input."""


def did_you_mean(name: str, candidates: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return ' Did you mean "x"?' for the closest candidate, or '' when nothing is close."""
    import difflib

    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return f' Did you mean "{close[0]}"?' if close else ""


def refuse_unknown(given: Iterable[str], known: Iterable[str], what: str, fix: str, where: str = "") -> None:
    """ConfigError naming the first (sorted) of ``given`` not in ``known`` (``Unknown <what> "name"<where>.``)
    with a did-you-mean suggestion; nothing when every name is known."""
    known_set = set(known)
    unknown = sorted(set(given) - known_set)
    if unknown:
        raise ConfigError(f'Unknown {what} "{unknown[0]}"{where}.{did_you_mean(unknown[0], known_set)}', fix)
