"""The robustness report: per-category success of one or two checkpoints under a benchmark's perturbations.

Input: for each checkpoint (a label), one ``(category key, success)`` outcome per episode. Output: one row per
category in the benchmark's own order plus a ``total`` row (episode-weighted over the perturbed categories,
as LIBERO-Plus's leaderboard Total is; LIBERO-PRO's unperturbed ``original`` row stays out of it), each with its Wilson 95% interval
(:func:`~vlarl_cli.training.evaluation.stats.wilson_interval`); with two checkpoints also the difference
second - first with Newcombe's interval. Written as ``robustness.json`` and ``robustness.png`` (a bar chart
with the intervals), printed as a table. Categories a checkpoint's policy cannot see (a state-mode policy
reads no images and no language) are marked on every output, never silently mixed in.

    report = build_report("LIBERO-PRO", "libero_pro_goal", CATEGORIES, {"SFT": sft, "RL": rl},
                          inputs={"SFT": ("state",), "RL": ("state",)})
    write_report(Path("eval/robustness"), report); print_report(report)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vlarl_cli.envs.robustness import Category
from vlarl_cli.errors import EnvError
from vlarl_cli.training.evaluation.stats import newcombe_interval, wilson_interval

#: the base suite's own (unperturbed) episodes, when a LIBERO-PRO evaluation includes them
ORIGINAL = Category("original", "Original (LIBERO)", "no perturbation", ("images", "state", "language"))
REPORT_JSON = "robustness.json"
REPORT_PNG = "robustness.png"
TOTAL = "total"


@dataclass(frozen=True)
class CategoryRate:
    """Success of one checkpoint in one category (or the ``total`` row)."""

    key: str
    title: str
    successes: int
    episodes: int
    visible: bool

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else float("nan")

    @property
    def ci95(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.episodes)


@dataclass
class RobustnessReport:
    """Per-category rates of up to two labelled checkpoints on one split of one benchmark."""

    benchmark: str
    split: str
    runs: dict[str, list[CategoryRate]]
    inputs: dict[str, tuple[str, ...]]
    deviations: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return list(self.runs)

    def differences(self) -> list[dict[str, Any]]:
        """Second minus first checkpoint per row, Newcombe 95% interval (empty with one checkpoint)."""
        if len(self.runs) != 2:
            return []
        a, b = self.runs.values()
        out = []
        for ra, rb in zip(a, b, strict=True):
            d, lo, hi = newcombe_interval(ra.successes, ra.episodes, rb.successes, rb.episodes)
            out.append({"key": ra.key, "difference": d, "ci95": [lo, hi], "significant": lo > 0 or hi < 0})
        return out

    def to_json(self) -> dict[str, Any]:
        runs = {label: [{**asdict(r), "rate": r.rate, "ci95": list(r.ci95)} for r in rows]
                for label, rows in self.runs.items()}
        return {"benchmark": self.benchmark, "split": self.split, "interval": "Wilson score, 95%",
                "total": "episode-weighted over the perturbed categories shown", "runs": runs,
                "policy_inputs": {k: list(v) for k, v in self.inputs.items()},
                "differences": self.differences(), "deviations": self.deviations}


def tally(outcomes: Iterable[tuple[str, bool]], categories: Sequence[Category],
          inputs: Sequence[str]) -> list[CategoryRate]:
    """Count ``(category key, success)`` outcomes per category (benchmark order) and in total.

    Categories without an outcome are left out; an outcome of a category not in ``categories`` raises.
    """
    known = {c.key: c for c in categories}
    counts: dict[str, list[int]] = {}
    for key, success in outcomes:
        if key not in known:
            raise EnvError(f'An episode outcome names category "{key}", which is not one of {list(known)}.',
                           fix="Tally outcomes with the category list of the benchmark they came from.")
        k_n = counts.setdefault(key, [0, 0])
        k_n[0] += bool(success)
        k_n[1] += 1
    rows = [CategoryRate(c.key, c.title, successes=counts[c.key][0], episodes=counts[c.key][1],
                         visible=c.visible_to(inputs))
            for c in categories if c.key in counts]
    perturbed = [r for r in rows if r.key != ORIGINAL.key]  # the unperturbed reference row is not a perturbation
    total = CategoryRate(TOTAL, "Total (perturbed)", sum(r.successes for r in perturbed),
                         sum(r.episodes for r in perturbed), visible=any(r.visible for r in perturbed))
    return [*rows, total]


def build_report(benchmark: str, split: str, categories: Sequence[Category],
                 outcomes: Mapping[str, Iterable[tuple[str, bool]]], *, inputs: Mapping[str, Sequence[str]],
                 deviations: Sequence[str] = ()) -> RobustnessReport:
    """One report from the outcomes of one or two labelled checkpoints (both must cover the same categories)."""
    if not 1 <= len(outcomes) <= 2:
        raise EnvError(f"A robustness report compares one or two checkpoints, got {len(outcomes)}.",
                       fix="Pass one checkpoint, or two to see them side by side.")
    runs = {label: tally(o, categories, inputs[label]) for label, o in outcomes.items()}
    shapes = {label: [(r.key, r.episodes) for r in rows] for label, rows in runs.items()}
    if len({tuple(s) for s in shapes.values()}) > 1:
        raise EnvError(f"The checkpoints were evaluated on different episodes: {shapes}.",
                       fix="Evaluate both on the same split and categories before comparing them.")
    return RobustnessReport(benchmark, split, runs, {k: tuple(v) for k, v in inputs.items()}, list(deviations))


def unseen_note(report: RobustnessReport) -> list[str]:
    """One line per checkpoint naming the categories its policy cannot see."""
    notes = []
    for label, rows in report.runs.items():
        hidden = [r.title for r in rows if not r.visible and r.key != TOTAL]
        if hidden:
            notes.append(f"{label} reads {'+'.join(report.inputs[label])} only: {', '.join(hidden)} "
                         "change nothing it observes (their rate measures the unperturbed task)")
    return notes


def write_report(out_dir: Path, report: RobustnessReport) -> tuple[Path, Path]:
    """``robustness.json`` and ``robustness.png`` in ``out_dir`` (atomic writes)."""
    from vlarl_cli.checkpoints.atomic import atomic_write_bytes, atomic_write_json

    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = atomic_write_json(out_dir / REPORT_JSON, {**report.to_json(), "notes": unseen_note(report)})
    png_path = atomic_write_bytes(out_dir / REPORT_PNG, render_png(report))
    return json_path, png_path


def render_png(report: RobustnessReport) -> bytes:
    """A grouped bar chart (one bar per checkpoint per category) with Wilson 95% error bars, PNG bytes.
    Bars of categories the checkpoint cannot see are hatched."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    rows0 = next(iter(report.runs.values()))
    width = 0.8 / len(report.runs)
    fig, ax = plt.subplots(figsize=(1.2 * len(rows0) + 2.5, 4.2), dpi=110)
    for i, (label, rows) in enumerate(report.runs.items()):
        xs = [j + (i - (len(report.runs) - 1) / 2) * width for j in range(len(rows))]
        rates = [100 * r.rate for r in rows]
        err = [[100 * (r.rate - r.ci95[0]) for r in rows], [100 * (r.ci95[1] - r.rate) for r in rows]]
        bars = ax.bar(xs, rates, width, yerr=err, capsize=3, label=label, color=f"C{i}")
        for bar, r in zip(bars, rows, strict=True):
            if not r.visible:
                bar.set_hatch("//")
                bar.set_alpha(0.5)
    ax.set_xticks(range(len(rows0)), [r.title.replace(" ", "\n", 1) for r in rows0], fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("success rate (%), 95% Wilson interval")
    ax.set_title(f"{report.benchmark} {report.split}: success per perturbation category", fontsize=10)
    from matplotlib.patches import Patch

    # plain swatches: the first bar of a series may be hatched
    ax.legend(handles=[Patch(color=f"C{i}", label=label) for i, label in enumerate(report.runs)], fontsize=8)
    if unseen_note(report):
        fig.text(0.01, 0.01, "hatched: perturbation invisible to that policy's inputs", fontsize=7)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def print_report(report: RobustnessReport, console: Any = None) -> None:
    """The per-category table (and the difference column with two checkpoints), then the notes."""
    from rich.table import Table

    from vlarl_cli.training.evaluation.results import _console

    console = console or _console()
    table = Table(title=f"{report.benchmark} {report.split}: success per perturbation category")
    table.add_column("category")
    for label in report.labels:
        table.add_column(f"{label} n", justify="right")
        table.add_column(f"{label} success [95% CI]", justify="right")
    diffs = report.differences()
    if diffs:
        table.add_column(f"{report.labels[1]} - {report.labels[0]} [95% CI]", justify="right")
    for j, first in enumerate(next(iter(report.runs.values()))):
        cells = [first.title]
        for rows in report.runs.values():
            r = rows[j]
            mark = "" if r.visible else " *"
            cells += [str(r.episodes), f"{r.rate:.1%} [{r.ci95[0]:.1%}, {r.ci95[1]:.1%}]{mark}"]
        if diffs:
            d = diffs[j]
            cells.append(f"{d['difference']:+.1%} [{d['ci95'][0]:+.1%}, {d['ci95'][1]:+.1%}]"
                         + (" sig." if d["significant"] else ""))
        table.add_row(*cells, style="bold" if first.key == TOTAL else None)
    console.print(table)
    for note in unseen_note(report):
        console.print(f"* {note}", highlight=False)
    for deviation in report.deviations:
        console.print(f"[yellow]deviation from the protocol:[/] {deviation}", highlight=False)


def suite_category(suite: str) -> str:
    """The category key of a results folder's suite: a LIBERO-PRO suite's perturbation, ``original`` for the
    four base suites, a LIBERO-Plus suite's category; anything else raises (it is not a robustness result)."""
    from vlarl_cli.envs.libero_plus import suites as plus
    from vlarl_cli.envs.libero_pro.catalog import BASE_SUITES, pro_suites

    if suite in pro_suites():
        return pro_suites()[suite].category.key
    if suite in BASE_SUITES:
        return ORIGINAL.key
    if plus.is_plus_suite(suite):
        return plus.all_suite_names()[suite][1]
    raise EnvError(f'Suite "{suite}" is not part of LIBERO-PRO or LIBERO-Plus; a robustness report needs their suites.',
                   fix="Evaluate a robustness split, e.g. vlarl eval --suite libero_pro_spatial or --suite libero_plus_goal.")


def _benchmark(suites: set[str]) -> tuple[str, tuple[Category, ...], str]:
    """(benchmark, its categories, the split's base suites) of the suites a results folder holds."""
    from vlarl_cli.envs.libero_plus import catalog as plus_catalog
    from vlarl_cli.envs.libero_plus import suites as plus
    from vlarl_cli.envs.libero_pro.catalog import CATEGORIES, pro_suites

    if suites and all(plus.is_plus_suite(s) for s in suites):
        return "LIBERO-Plus", plus_catalog.CATEGORIES, ", ".join(sorted({plus.base_suite(s) for s in suites}))
    bases = sorted({pro_suites()[s].base_suite if s in pro_suites() else s for s in suites})
    return "LIBERO-PRO", (ORIGINAL, *CATEGORIES), ", ".join(bases)


def _policy_inputs(card: dict[str, Any]) -> tuple[str, ...]:
    """What the evaluated policy reads, from its protocol card (state mode: no camera, no language)."""
    return ("state",) if card.get("obs_mode") == "state" else ("images", "state", "language")


def report_from_folders(folders: Sequence[Path]) -> RobustnessReport:
    """The robustness report of one or two ``vlarl eval`` results folders of LIBERO-PRO or LIBERO-Plus suites (two: over the
    episodes both hold, so both rates come from the same init states). Labels are the folder names."""
    from vlarl_cli.video.episodes import CARD, load_card, read_episodes, unique_episodes

    loaded = []
    for folder in folders:
        folder = Path(folder)
        loaded.append((folder, load_card(folder / CARD), unique_episodes(read_episodes(folder))))
    common = set.intersection(*(set(eps) for _, _, eps in loaded))
    if not common:
        raise EnvError(f"The results folders {', '.join(map(str, folders))} share no episode.",
                       fix="Evaluate both checkpoints on the same split, tasks and trials.")
    if all(suite_category(k[0]) == ORIGINAL.key for k in common):  # the report's perturbed rates would be nan%
        raise EnvError(f"The results in {', '.join(map(str, folders))} are of unperturbed suites only "
                       f"({', '.join(sorted({k[0] for k in common}))}); a robustness report compares perturbed ones.",
                       fix="Evaluate a robustness split, e.g. vlarl eval --suite libero_pro_spatial or --suite "
                       "libero_plus_goal, then pass its results folder.")
    labels = [f.name if [x.name for x, _, _ in loaded].count(f.name) == 1 else str(f) for f, _, _ in loaded]
    outcomes = {label: [(suite_category(k[0]), eps[k].success) for k in sorted(common)]
                for label, (_, _, eps) in zip(labels, loaded, strict=True)}
    inputs = {label: _policy_inputs(card) for label, (_, card, _) in zip(labels, loaded, strict=True)}
    deviations = sorted({f"{label}: {d}" for label, (_, card, _) in zip(labels, loaded, strict=True)
                         for d in card.get("deviations", [])})
    benchmark, categories, split = _benchmark({k[0] for k in common})
    return build_report(benchmark, split, categories, outcomes, inputs=inputs, deviations=deviations)
