"""What robustness benchmarks (LIBERO-PRO, LIBERO-Plus) have in common: splits made of perturbation categories.

A *split* names a set of episodes (``libero_pro_spatial``, ``libero_plus``); a *category* is one kind of
perturbation inside it (``swap``, ``camera``), the unit of the per-category table each benchmark reports.
:class:`Category` says what a perturbation changes and which policy inputs can see the change, so a report
can say plainly which categories mean nothing for a policy that reads no images (vlarl's state mode) or
no language.

Facts and their sources: ``docs/benchmarks/libero_pro_plus.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from vlarl_cli.errors import EnvError, did_you_mean

#: Policy inputs a perturbation can show up in.
Input = Literal["images", "state", "language"]


@dataclass(frozen=True)
class Category:
    """One perturbation category of a robustness benchmark.

    Attributes:
        key: short name used on the command line (``lan``, ``camera``).
        title: the column / row name the benchmark's own table uses.
        changes: what the perturbation changes in the episode (from the benchmark's files and code).
        seen_by: the policy inputs in which the change appears (``images``, ``state``, ``language``).
    """

    key: str
    title: str
    changes: str
    seen_by: tuple[Input, ...]

    def visible_to(self, inputs: Iterable[str]) -> bool:
        """Whether a policy reading ``inputs`` can see this perturbation at all."""
        return bool(set(self.seen_by) & set(inputs))


def language_from_name(name: str) -> str:
    """LIBERO's rule for an instruction made from a task name: ``_`` -> space, and for LIBERO-100 names
    (``KITCHEN_SCENE3_...``) without the scene prefix (``benchmark.grab_language_from_filename``)."""
    if name[:1].isupper():
        start = name.find("SCENE") + (8 if "SCENE10" in name else 7)
        name = name[start:]
    return " ".join(name.split("_"))


def select_categories(benchmark: str, known: Sequence[Category], given: Sequence[str] | None) -> list[Category]:
    """``given`` category keys (None: all) resolved in the benchmark's order; an unknown key raises one
    paragraph listing the known ones."""
    if not given:
        return list(known)
    by_key = {c.key: c for c in known}
    for key in given:
        if key not in by_key:
            listing = ", ".join(f"{c.key} ({c.title})" for c in known)
            raise EnvError(
                f'Unknown {benchmark} category "{key}".{did_you_mean(key, list(by_key))} '
                f"Known categories: {listing}.",
                fix=f"Pass some of them comma-separated, e.g. --categories {known[0].key},{known[-1].key}.",
            )
    return [c for c in known if c.key in set(given)]


def unknown_split(benchmark: str, split: str, known: Sequence[str]) -> EnvError:
    """The error for a split name the benchmark does not have, listing the known ones."""
    return EnvError(
        f'Unknown {benchmark} split "{split}".{did_you_mean(split, list(known))} Known splits: {", ".join(known)}.',
        fix=f"Use one of them, e.g. --suite {known[0]}.",
    )
