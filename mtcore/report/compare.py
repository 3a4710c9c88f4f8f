"""Side-by-side runs in one workdir: ``mtcore compare A.yaml B.yaml`` and ``mtcore run R.yaml
--ablate STEP``. Every variant runs with the ordinary runner, so a step that two variants
share (same id and hash) runs once and is reused. The comparison holds, per variant:

- the pairs kept after each data step (the ``pairs_out`` count of its manifest);
- the seconds of each training step (as recorded when it ran, also when reused);
- every score of an evaluate-like step, by direction, step and metric, with its signature;
  against a baseline (the full recipe of an ablation) each variant's difference too.

It is written as markdown (``compare.md`` or ``ablation.md``) and, with matplotlib, as a PNG
of grouped bars per metric (``compare.png`` or ``ablation.png``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtcore.report.markdown import ScoreRow, _code, score_rows

if TYPE_CHECKING:
    from mtcore.contracts.registry import Registry
    from mtcore.recipe.load import Recipe
    from mtcore.run.results import RunResult

log = logging.getLogger(__name__)


@dataclass
class Variant:
    """One column of the comparison: a label, its recipe and, once run, its result."""

    label: str
    recipe: Recipe
    result: RunResult | None = None


def file_label(text: str) -> str:
    """A label usable in a file name: letters, digits, '.', '_' and '-' (an ablation's
    ``-clean,spm`` becomes ``no-clean-spm``)."""
    text = re.sub(r"^-", "no-", text)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "variant"


def unique_labels(names: list[str]) -> list[str]:
    """``names`` made unique by a number after repeats: [a, a, b] -> [a, a-2, b]."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


def run_variants(
    variants: list[Variant],
    registry: Registry,
    workdir: Path,
    hooks: Any = None,
    show_progress: bool = False,
) -> None:
    """Runs each variant in ``workdir`` in turn (reusing what an earlier one made), showing
    progress with ``show_progress``."""
    from mtcore.report.display import Display
    from mtcore.run.runner import Runner

    for variant in variants:
        log.info("variant %s: recipe %s", variant.label, variant.recipe.name)
        runner = Runner(
            variant.recipe,
            registry,
            workdir,
            hooks,
            show_progress,
            label=file_label(variant.label),
            display=Display if show_progress else None,
        )
        variant.result = runner.run()


def _results(variants: list[Variant]) -> list[tuple[str, RunResult]]:
    done = []
    for variant in variants:
        if variant.result is None:
            raise ValueError(f"variant {variant.label!r} has not run")
        done.append((variant.label, variant.result))
    return done


StepCells = dict[tuple[str, str], Any]


def _step_values(variants: list[Variant], pick: Any) -> tuple[list[str], StepCells]:
    """Rows (step ids, first-seen order) and cells (step, label) -> value for the steps
    ``pick(item)`` gives a value for."""
    rows: list[str] = []
    cells: StepCells = {}
    for label, result in _results(variants):
        for item in result.results:
            value = pick(item)
            if value is None:
                continue
            if item.planned.id not in rows:
                rows.append(item.planned.id)
            cells[(item.planned.id, label)] = value
    return rows, cells


def _pairs(item: Any) -> Any:
    return item.manifest.get("counts", {}).get("pairs_out")


def _train_seconds(item: Any) -> Any:
    if not item.planned.spec.plugin.trains:
        return None
    return float(item.manifest.get("seconds", 0.0))


def _delta(value: float, base: float | None) -> str:
    if base is None:
        return f"{value:.2f}"
    return f"{value:.2f} ({value - base:+.2f})"


def score_keys(variants: list[Variant]) -> tuple[list[tuple[str, str, str]], dict[Any, ScoreRow]]:
    """(direction, step, metric) rows in first-seen order and (row, label) -> score."""
    keys: list[tuple[str, str, str]] = []
    cells: dict[Any, ScoreRow] = {}
    for label, result in _results(variants):
        for row in score_rows(result):
            key = (row.direction, row.step, row.metric)
            if key not in keys:
                keys.append(key)
            cells[(key, label)] = row
    return keys, cells


def render_comparison(
    title: str, variants: list[Variant], baseline: str | None = None, plot: str | None = None
) -> str:
    """The comparison as markdown; scores of the other variants show their difference to the
    ``baseline`` variant's (by label) when one is given."""
    labels = [v.label for v in variants]
    head = "| | " + " | ".join(f"`{label}`" for label in labels) + " |"
    rule = "|---|" + "---:|" * len(labels)
    lines = [f"# {title}", "", "| variant | recipe | profile | ablated |", "|---|---|---|---|"]
    for v in variants:
        ablated = ", ".join(v.recipe.ablated) or "—"
        lines.append(f"| `{v.label}` | {v.recipe.name} | {v.recipe.profile or '—'} | {ablated} |")

    by_step = head.replace("| |", "| step |")
    steps, pairs = _step_values(variants, _pairs)
    if steps:
        lines += ["", "## Pairs kept after each data step", "", by_step, rule]
        for step in steps:
            cells = [pairs.get((step, label)) for label in labels]
            lines.append(
                f"| {step} | " + " | ".join("—" if c is None else f"{c:,}" for c in cells) + " |"
            )

    trains, seconds = _step_values(variants, _train_seconds)
    if trains:
        lines += ["", "## Training time (seconds)", "", by_step, rule]
        for step in trains:
            cells = [seconds.get((step, label)) for label in labels]
            lines.append(
                f"| {step} | " + " | ".join("—" if c is None else f"{c:.1f}" for c in cells) + " |"
            )
        totals = [sum(seconds.get((s, label)) or 0.0 for s in trains) for label in labels]
        lines.append("| **total** | " + " | ".join(f"{t:.1f}" for t in totals) + " |")

    keys, scores = score_keys(variants)
    if keys:
        note = f" (difference to `{baseline}` in brackets)" if baseline else ""
        lines += ["", f"## Scores{note}", ""]
        lines += ["| direction | step | metric | " + " | ".join(f"`{x}`" for x in labels) + " |"]
        lines += ["|---|---|---|" + "---:|" * len(labels)]
        for key in keys:
            base_row = scores.get((key, baseline)) if baseline else None
            base = base_row.score if base_row else None
            shown: list[str] = []
            for label in labels:
                row = scores.get((key, label))
                if row is None:
                    shown.append("—")
                else:
                    shown.append(_delta(row.score, None if label == baseline else base))
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(shown) + " |")
        signatures = dict.fromkeys((r.metric, r.signature) for r in scores.values())
        lines += ["", "| metric | signature |", "|---|---|"]
        lines += [f"| {metric} | {_code(signature)} |" for metric, signature in signatures]
        if plot:
            lines += ["", f"![scores]({plot})"]
    lines.append("")
    return "\n".join(lines)


def write_plot(variants: list[Variant], path: Path, title: str) -> bool:
    """Grouped bars: a panel per metric, a group per (direction, step), a bar per variant."""
    keys, scores = score_keys(variants)
    if not keys:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info("matplotlib is not installed: no %s", path)
        return False
    metrics = list(dict.fromkeys(k[2] for k in keys))
    groups = list(dict.fromkeys((k[0], k[1]) for k in keys))
    labels = [v.label for v in variants]
    width = 0.8 / len(labels)
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(2.0 + 0.9 * len(groups) * len(labels) * len(metrics) / 2 + 2,
                                  3.8), squeeze=False,
    )  # fmt: skip
    for ax, metric in zip(axes[0], metrics, strict=True):
        for i, label in enumerate(labels):
            heights = []
            for direction, step in groups:
                row = scores.get(((direction, step, metric), label))
                heights.append(row.score if row else 0.0)
            where = [g + (i - (len(labels) - 1) / 2) * width for g in range(len(groups))]
            bars = ax.bar(where, heights, width, label=label)
            ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
        ax.set_xticks(range(len(groups)), [f"{d}\n{s}" for d, s in groups], fontsize=8)
        ax.set_title(metric, fontsize=10)
        ax.margins(y=0.15)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_comparison(
    workdir: Path, name: str, title: str, variants: list[Variant], baseline: bool = False
) -> Path:
    """``<name>.md`` (and ``<name>.png``) in ``workdir``; with ``baseline`` the first variant
    is the one the others' differences are taken to. Returns the markdown's path."""
    png = workdir / f"{name}.png"
    png.unlink(missing_ok=True)
    plot = png.name if write_plot(variants, png, title) else None
    text = render_comparison(title, variants, variants[0].label if baseline else None, plot)
    path = workdir / f"{name}.md"
    path.write_text(text, encoding="utf-8")
    return path
