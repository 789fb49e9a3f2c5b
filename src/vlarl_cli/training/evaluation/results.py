"""Results of an evaluation: per task, per suite and overall success rates with 95% Wilson intervals
(:class:`EvalSummary`), written as ``summary.json`` / ``summary.csv`` (every CSV row carries the card)
and printed as a rich table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli.training.evaluation.plan import EpisodeKey
from vlarl_cli.training.evaluation.runner import RunStats
from vlarl_cli.training.evaluation.stats import wilson_interval
from vlarl_cli.video.episodes import SUMMARY_CSV, SUMMARY_JSON, EpisodeRecord, unique_episodes


@dataclass
class RateRow:
    """A success rate with its 95% Wilson interval. ``level``: task, suite or overall."""

    level: str
    suite: str
    task: int | None
    task_name: str
    n: int
    successes: int
    success_rate: float
    ci95_low: float
    ci95_high: float
    mean_steps_success: float | None

    @classmethod
    def of(cls, level: str, suite: str, task: int | None, name: str, records: list[EpisodeRecord]) -> RateRow:
        k = sum(r.success for r in records)
        lo, hi = wilson_interval(k, len(records))
        steps = [r.steps for r in records if r.success]
        return cls(level, suite, task, name, len(records), k, k / len(records) if records else float("nan"),
                   lo, hi, float(np.mean(steps)) if steps else None)


@dataclass
class EvalSummary:
    """Result of an evaluation: the card and the rates (tasks, then suites, then overall)."""

    card: dict[str, Any]
    rows: list[RateRow]
    planned: int
    finished: int
    run_now: int = 0
    skipped: int = 0
    out_dir: Path | None = None
    stats: RunStats = field(default_factory=RunStats)

    @property
    def complete(self) -> bool:
        return self.finished == self.planned

    @property
    def overall(self) -> RateRow:
        return next(r for r in self.rows if r.level == "overall")

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """Flat metrics for loggers: ``eval/success_rate``, ``eval/<suite>/success_rate``, CI bounds."""
        out: dict[str, float] = {}
        for r in self.rows:
            if r.level == "task":
                continue
            base = prefix if r.level == "overall" else f"{prefix}/{r.suite}"
            out[f"{base}/success_rate"] = r.success_rate
            out[f"{base}/ci95_low"] = r.ci95_low
            out[f"{base}/ci95_high"] = r.ci95_high
            out[f"{base}/num_episodes"] = float(r.n)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"card": self.card, "complete": self.complete, "planned": self.planned, "finished": self.finished,
                "statistics": "95% Wilson score interval (z = 1.96)",
                "rows": [asdict(r) for r in self.rows], "run": asdict(self.stats)}


def summarize(records: list[EpisodeRecord], card: dict[str, Any], plan: list[EpisodeKey]) -> EvalSummary:
    """Rates over the planned episodes found in ``records`` (one record per episode)."""
    unique = unique_episodes(records)
    done = [unique[(k.suite, k.task, k.trial)] for k in plan if (k.suite, k.task, k.trial) in unique]
    rows: list[RateRow] = []
    suites = list(dict.fromkeys(k.suite for k in plan))
    for s in suites:
        for t in dict.fromkeys(k.task for k in plan if k.suite == s):
            rs = [r for r in done if r.suite == s and r.task == t]
            if rs:
                rows.append(RateRow.of("task", s, t, rs[0].task_name, rs))
    for s in suites:
        rs = [r for r in done if r.suite == s]
        if rs:
            rows.append(RateRow.of("suite", s, None, "", rs))
    rows.append(RateRow.of("overall", "+".join(suites), None, "", done))
    return EvalSummary(card=card, rows=rows, planned=len(plan), finished=len(done))


CSV_CARD_COLUMNS = ("protocol", "max_steps", "settle_steps", "env_seed", "action_mode", "replan_size",
                    "resolution", "checkpoint_sha256", "vlarl_version", "deviations")


def write_summary(out_dir: Path, summary: EvalSummary) -> None:
    """``summary.json`` and ``summary.csv`` (atomic; every CSV row carries the card columns)."""
    import csv
    import io

    from vlarl_cli.checkpoints.atomic import atomic_write_json, atomic_write_text

    atomic_write_json(out_dir / SUMMARY_JSON, summary.to_json())
    card = summary.card
    buf = io.StringIO()
    rate_cols = [f for f in RateRow.__dataclass_fields__]
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(rate_cols + list(CSV_CARD_COLUMNS))
    for r in summary.rows:
        max_steps = card["max_steps"].get(r.suite) if r.level != "overall" else \
            "/".join(str(v) for v in card["max_steps"].values())
        ckpt = card.get("checkpoint") or {}
        extra = [card["protocol"], max_steps, card["settle_steps"], card["env_seed"], card["action_mode"],
                 card["replan_size"], card["resolution"], ckpt.get("sha256", ""), card["vlarl_version"],
                 "; ".join(card["deviations"])]
        row = asdict(r)
        writer.writerow([("" if row[c] is None else round(row[c], 6) if isinstance(row[c], float) else row[c])
                         for c in rate_cols] + extra)
    atomic_write_text(out_dir / SUMMARY_CSV, buf.getvalue())


def _console() -> Any:
    """A rich console at least 120 columns wide (logs and pipes default to 80, which folds the table)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal and console.width >= 120 else Console(width=max(console.width, 120))


def print_summary(summary: EvalSummary, console: Any = None) -> None:
    """The rich table: one row per task, per suite and overall, with the card underneath."""
    from rich.table import Table

    console = console or _console()
    card = summary.card
    table = Table(title=f"LIBERO evaluation ({card['protocol']} protocol)", show_lines=False)
    for col, just in (("suite", "left"), ("task", "right"), ("name", "left"), ("n", "right"),
                      ("success", "right"), ("95% CI (Wilson)", "right"), ("steps (succ.)", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in summary.rows:
        style = "bold" if r.level != "task" else None
        name = r.task_name if len(r.task_name) < 48 else r.task_name[:45] + "..."
        table.add_row(r.suite if r.level != "overall" else f"ALL ({r.suite})" if "+" in r.suite else "ALL",
                      "" if r.task is None else str(r.task), name, str(r.n), f"{r.successes} ({r.success_rate:.1%})",
                      f"[{r.ci95_low:.1%}, {r.ci95_high:.1%}]",
                      "" if r.mean_steps_success is None else f"{r.mean_steps_success:.0f}", style=style)
    console.print(table)
    ckpt = card.get("checkpoint") or {}
    console.print(
        f"protocol {card['protocol']} | max steps {card['max_steps']} + {card['settle_steps']} settle | "
        f"env seed {card['env_seed']} | {card['action_mode']} | replan every {card['replan_size']} steps | "
        f"{card['resolution']} px | weights {ckpt.get('sha256', '?')[:12]} ({ckpt.get('source', '?')}) | "
        f"vlarl {card['vlarl_version']}", highlight=False)
    for d in card["deviations"]:
        console.print(f"[yellow]deviation from the protocol:[/] {d}", highlight=False)
    if not summary.complete:
        console.print(f"[red]incomplete:[/] {summary.finished} of {summary.planned} planned episodes finished; "
                      "run the same command again to finish them.", highlight=False)
