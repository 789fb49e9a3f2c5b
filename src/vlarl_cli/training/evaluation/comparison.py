"""``vlarl eval --compare A B``: the per-task, per-suite and overall difference B - A between two result
folders with Newcombe's 95% interval (:mod:`vlarl_cli.training.evaluation.stats`), over the episodes
both folders hold, and the card fields in which the two evaluations differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlarl_cli.envs.libero.suites import all_suite_order
from vlarl_cli.training.evaluation.card import card_conflicts
from vlarl_cli.training.evaluation.results import _console
from vlarl_cli.training.evaluation.stats import newcombe_interval
from vlarl_cli.video.episodes import CARD, ResultsError, load_card, unique_episodes

COMPARISON_JSON = "comparison.json"  # what ``vlarl eval --compare A B --out DIR`` writes


@dataclass
class DiffRow:
    """Rate of B minus rate of A with Newcombe's 95% interval; significant when it excludes 0."""

    level: str
    suite: str
    task: int | None
    n_a: int
    rate_a: float
    n_b: int
    rate_b: float
    difference: float
    ci95_low: float
    ci95_high: float

    @property
    def significant(self) -> bool:
        return self.ci95_low > 0 or self.ci95_high < 0


@dataclass
class Comparison:
    a: Path
    b: Path
    rows: list[DiffRow]
    card_differences: list[str]
    method: str = "Newcombe (1998) hybrid score interval, method 10, 95%; significant = interval excludes 0"


def compare(a_dir: Path, b_dir: Path, *, show: bool = True) -> Comparison:
    """Per-task, per-suite and overall difference ``B - A`` between two ``vlarl eval`` result folders.

    Only episodes present in both folders' plans are compared ((suite, task, trial) matched, so both
    rates come from the same init states). Card differences other than the checkpoint are reported:
    rates from different protocols are not comparable.
    """

    from vlarl_cli.video.episodes import read_episodes

    folders = []
    for d in (Path(a_dir), Path(b_dir)):
        if not (d / CARD).is_file():
            raise ResultsError(f"{d} is not a vlarl eval results folder (no {CARD}).",
                               "Pass two folders written by `vlarl eval --out DIR`.")
        folders.append((load_card(d / CARD), unique_episodes(read_episodes(d))))
    (card_a, eps_a), (card_b, eps_b) = folders
    unknown = sorted({k[0] for k in (*eps_a, *eps_b)} - set(all_suite_order()))
    if unknown:  # a hand-edited or foreign log: no suite order (and no protocol) to compare it under
        raise ResultsError(f"The episode logs of {a_dir} / {b_dir} name suites vlarl does not know: {unknown[:3]}.",
                           "Compare folders written by `vlarl eval --out DIR` (their episodes.jsonl unedited).")
    common = sorted(set(eps_a) & set(eps_b), key=lambda k: (all_suite_order().index(k[0]), k[1], k[2]))
    if not common:
        raise ResultsError(f"{a_dir} and {b_dir} have no episode in common.",
                           "Evaluate both checkpoints on the same suite, tasks and trials.")
    rows: list[DiffRow] = []

    def row(level: str, suite: str, task: int | None, ks: list[tuple[str, int, int]]) -> DiffRow:
        ka, kb = sum(eps_a[k].success for k in ks), sum(eps_b[k].success for k in ks)
        d, lo, hi = newcombe_interval(ka, len(ks), kb, len(ks))
        return DiffRow(level, suite, task, len(ks), ka / len(ks), len(ks), kb / len(ks), d, lo, hi)

    suites = list(dict.fromkeys(k[0] for k in common))
    for s in suites:
        for t in dict.fromkeys(k[1] for k in common if k[0] == s):
            rows.append(row("task", s, t, [k for k in common if k[0] == s and k[1] == t]))
    for s in suites:
        rows.append(row("suite", s, None, [k for k in common if k[0] == s]))
    rows.append(row("overall", "+".join(suites), None, common))
    diffs = [c for c in card_conflicts(card_a, card_b) if c != "checkpoint.sha256"]
    result = Comparison(Path(a_dir), Path(b_dir), rows, diffs)
    if show:
        print_comparison(result)
    return result


def write_comparison(cmp: Comparison, out_dir: Path) -> Path:
    """``comparison.json`` in ``out_dir`` (atomic): both folders, every row with its interval and verdict, the
    method and the card fields in which the two evaluations differ."""
    from dataclasses import asdict

    from vlarl_cli.checkpoints.atomic import atomic_write_json

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(r), "significant": r.significant} for r in cmp.rows]
    return atomic_write_json(out_dir / COMPARISON_JSON, {"a": str(cmp.a), "b": str(cmp.b), "method": cmp.method,
                                                          "card_differences": cmp.card_differences, "rows": rows})


def print_comparison(cmp: Comparison, console: Any = None) -> None:
    from rich.table import Table

    console = console or _console()
    table = Table(title=f"B - A   (A = {cmp.a}, B = {cmp.b})")
    for col in ("suite", "task", "n", "A", "B", "B - A", "95% CI (Newcombe)", "significant"):
        table.add_column(col, justify="left" if col == "suite" else "right")
    for r in cmp.rows:
        table.add_row(r.suite if r.level != "overall" else "ALL", "" if r.task is None else str(r.task), str(r.n_a),
                      f"{r.rate_a:.1%}", f"{r.rate_b:.1%}", f"{r.difference:+.1%}",
                      f"[{r.ci95_low:+.1%}, {r.ci95_high:+.1%}]",
                      ("[green]yes[/]" if r.difference > 0 else "[red]yes[/]") if r.significant else "no",
                      style="bold" if r.level != "task" else None)
    console.print(table)
    console.print(cmp.method, highlight=False)
    if cmp.card_differences:
        console.print(f"[yellow]warning:[/] the two evaluations differ in {', '.join(cmp.card_differences)}; "
                      "their rates are not directly comparable.", highlight=False)
