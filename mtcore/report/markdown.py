"""``report.md`` in the workdir: what ran, what was cached, counts, timings and scores; the
scores again as a table per direction and, when matplotlib is installed, ``scores.png``. The
run page, ``report.html``, is :mod:`mtcore.report.page`'s; the same hook writes both."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtcore.contracts.hooks import hookimpl
from mtcore.recipe.stages import stage_mark

if TYPE_CHECKING:
    from mtcore.recipe.load import Recipe
    from mtcore.run.results import RunResult

log = logging.getLogger(__name__)
PLOT_FILE = "scores.png"


@dataclass(frozen=True)
class ScoreRow:
    """One metric of one evaluate-like step (any step whose manifest metrics carry a
    signature); ``direction`` is the step's own (``en-ja``) or, failing that, the step id."""

    step: str
    direction: str
    metric: str
    score: float
    signature: str
    higher_is_better: bool
    stage: str | None = None  # the stage the step scores (Step.stage), if any


def _counts(manifest: dict[str, Any]) -> str:
    counts = manifest.get("counts", {})
    parts = [f"{k}={v}" for k, v in counts.items() if not k.startswith(("dropped.", "input."))]
    drops = {k[len("dropped.") :]: v for k, v in counts.items() if k.startswith("dropped.")}
    if drops:
        parts.append("dropped: " + ", ".join(f"{k} {v}" for k, v in drops.items()))
    handled = {k[len("input.") :]: v for k, v in counts.items() if k.startswith("input.")}
    if handled:
        parts.append("input: " + ", ".join(f"{k} {v}" for k, v in handled.items()))
    return "; ".join(parts)


def score_rows(result: RunResult) -> list[ScoreRow]:
    rows = []
    for item in result.results:
        staged = item.planned.spec.plugin.stage(item.planned.id)
        for name, value in item.manifest.get("metrics", {}).items():
            if isinstance(value, dict) and "signature" in value:
                rows.append(
                    ScoreRow(
                        item.planned.id,
                        str(value.get("direction") or item.planned.id),
                        name,
                        float(value["score"]),
                        str(value["signature"]),
                        bool(value.get("higher_is_better", True)),
                        None if staged is None else staged[0],
                    )
                )
    return rows


def _code(text: str) -> str:
    """A signature as inline code in a table cell: its pipes escaped, or they split the cell."""
    return "`" + text.replace("|", "\\|") + "`"


def _label(row: ScoreRow, rows: list[ScoreRow]) -> str:
    """The direction, with the step id where two steps evaluate the same direction."""
    steps = {r.step for r in rows if r.direction == row.direction}
    return row.direction if len(steps) == 1 else f"{row.direction} ({row.step})"


def direction_table(rows: list[ScoreRow]) -> list[str]:
    """Markdown: a row per (direction, step), a column per metric, then each signature."""
    metrics = list(dict.fromkeys(r.metric for r in rows))
    keys = list(dict.fromkeys((r.direction, r.step) for r in rows))
    cell = {(r.direction, r.step, r.metric): r.score for r in rows}
    lines = [
        "| direction | step | " + " | ".join(metrics) + " |",
        "|---|---|" + "---:|" * len(metrics),
    ]
    for direction, step in keys:
        values = [cell.get((direction, step, m)) for m in metrics]
        shown = ["" if v is None else f"{v:.2f}" for v in values]
        lines.append(f"| {direction} | {step} | " + " | ".join(shown) + " |")
    lines += ["", "| metric | directions | signature |", "|---|---|---|"]
    signatures: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        signatures.setdefault((r.metric, r.signature), []).append(r.direction)
    for (metric, signature), directions in signatures.items():
        shown_dirs = ", ".join(dict.fromkeys(directions))
        lines.append(f"| {metric} | {shown_dirs} | {_code(signature)} |")
    return lines


def stage_table(rows: list[ScoreRow], marks: dict[str, str] | None = None) -> list[str]:
    """Markdown: a row per stage, a column per (direction, metric), for the steps that score a
    stage (:meth:`mtcore.contracts.step.Step.stage`: one per stage of a paper's system, in recipe
    order);
    each cell also shows the change from the stage above it. ``marks``: per stage, what its
    name cell adds (``submitted``, a note: :func:`mtcore.recipe.stages.stage_mark`)."""
    kept = [(r.stage, r) for r in rows if r.stage is not None]
    if not kept:
        return []
    stages = list(dict.fromkeys(stage for stage, _ in kept))
    columns = list(dict.fromkeys((r.direction, r.metric) for _, r in kept))
    cell = {(stage, r.direction, r.metric): r.score for stage, r in kept}
    lines = [
        "| stage | " + " | ".join(f"{d} {m}" for d, m in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for i, stage in enumerate(stages):
        shown = []
        for direction, metric in columns:
            value = cell.get((stage, direction, metric))
            before = cell.get((stages[i - 1], direction, metric)) if i else None
            text = "" if value is None else f"{value:.2f}"
            if value is not None and before is not None:
                text += f" ({value - before:+.2f})"
            shown.append(text)
        mark = (marks or {}).get(stage)
        name = f"{stage} ({mark.replace('|', '/')})" if mark else stage
        lines.append(f"| {name} | " + " | ".join(shown) + " |")
    return lines


def write_plot(rows: list[ScoreRow], path: Path, title: str) -> bool:
    """A bar chart per metric, a bar per direction. False (and a logged note) when
    matplotlib is not installed: the report then has the tables only."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a display
        import matplotlib.pyplot as plt
    except ImportError:
        log.info("matplotlib is not installed: %s has no plot (pip install matplotlib)", path)
        return False
    metrics = list(dict.fromkeys(r.metric for r in rows))
    keys = list(dict.fromkeys((r.direction, r.step) for r in rows))
    labels = [_label(next(r for r in rows if (r.direction, r.step) == k), rows) for k in keys]
    fig, axes = plt.subplots(
        1,
        len(metrics),
        figsize=(3.2 * len(metrics) + 1.5, 0.5 * len(keys) + 1.8),
        sharey=True,
        squeeze=False,
    )
    for ax, metric in zip(axes[0], metrics, strict=True):
        mine = {(r.direction, r.step): r for r in rows if r.metric == metric}
        where = [i for i, k in enumerate(keys) if k in mine]
        bars = ax.barh(where, [mine[keys[i]].score for i in where], color="#4472c4", height=0.6)
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
        better = "higher" if next(iter(mine.values())).higher_is_better else "lower"
        ax.set_title(f"{metric} ({better} is better)", fontsize=10)
        ax.margins(x=0.25)
    axes[0][0].set_yticks(range(len(keys)), labels)
    axes[0][0].invert_yaxis()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def render_report(recipe: Recipe, result: RunResult, plot: str | None = None) -> str:
    """The report's text; ``plot`` names the PNG written beside it, if any."""
    lines = [
        f"# {recipe.name}" + (f" — profile `{recipe.profile}`" if recipe.profile else ""),
        "",
    ]
    if recipe.ablated:
        lines += [f"Ablated: {', '.join(f'`{s}`' for s in recipe.ablated)} removed.", ""]
    if recipe.head.paper:
        lines += [f"Replicates: {recipe.head.paper}", ""]
    lines += [
        "## Steps",
        "",
        "| step | kind | status | seconds | counts |",
        "|---|---|---|---:|---|",
    ]
    for item in result.results:
        m = item.manifest
        lines.append(
            f"| {item.planned.id} | {item.planned.spec.kind} | {item.status} | "
            f"{m.get('seconds', 0):.1f} | {_counts(m)} |"
        )
    rows = score_rows(result)
    if rows:
        lines += [
            "",
            "## Scores",
            "",
            "| step | metric | score | signature |",
            "|---|---|---:|---|",
        ]
        for row in rows:
            lines.append(
                f"| {row.step} | {row.metric} | {row.score:.2f} | {_code(row.signature)} |"
            )
        head = recipe.head
        marks = {
            r.stage: stage_mark(head.submitted, head.stage_notes, recipe.steps, r.stage)
            for r in rows
            if r.stage is not None
        }
        by_stage = stage_table(rows, marks)
        if by_stage:
            lines += ["", "## Scores by stage", "", *by_stage]
        lines += ["", "## Scores by direction", "", *direction_table(rows), ""]
        lines.append(
            f"![scores by direction]({plot})" if plot else "(No plot: matplotlib is not installed.)"
        )
    lines += [
        "",
        f"Step outputs: `steps/<id>-<hash>/` with `manifest.json`. Log: `{result.log_file}`.",
        "",
    ]
    return "\n".join(lines)


def write_report(recipe: Recipe, result: RunResult, label: str | None = None) -> None:
    """``report.md`` and ``scores.png``; ``report.<label>.md`` and ``scores.<label>.png`` for
    a labelled run (one of several variants in a workdir)."""
    suffix = "" if label is None else f".{label}"
    name = PLOT_FILE if label is None else f"scores{suffix}.png"
    rows = score_rows(result)
    path = result.workdir / name
    path.unlink(missing_ok=True)  # a plot of an earlier run must not pass for this one's
    plot = name if rows and write_plot(rows, path, label or recipe.name) else None
    text = render_report(recipe, result, plot)
    (result.workdir / f"report{suffix}.md").write_text(text, encoding="utf-8")


class ReportWriter:
    """The core's hook implementation that writes the report when a run ends; registered by
    :func:`mtcore.report.hooks.make_plugin_manager` under ``REPORT``. The runner only
    announces the end of a run; ``mtcore report``-style rewrites call :func:`write_report`."""

    @hookimpl
    def mtcore_run_finished(self, recipe: Recipe, result: RunResult, label: str | None) -> None:
        from mtcore.contracts.registry import load_registry
        from mtcore.report.page import write_page

        write_report(recipe, result, label)
        write_page(result.workdir, load_registry(), label, result, running=False)
