"""What each section of the run page shows, as plain data (text, numbers, link targets) for the
templates in ``templates/``; none of it is markup, so every text is escaped where it is drawn."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtcore.chain.filtering import make_specs
from mtcore.contracts.errors import MtcoreError
from mtcore.report.page_charts import (
    STATUS_COLOURS,
    anchor,
    bar_chart_data,
    line_chart_data,
    nice,
    series_colours,
    slug,
)

REJECT_ROWS = 8  # rejected pairs shown per filter (the step keeps more: rejects/<filter>.tsv)
REJECT_CELL = 240  # characters of a rejected side shown (the whole in its tooltip)


@dataclass
class StepView:
    id: str
    kind: str
    dir: str
    inputs: dict[str, str]
    stage: tuple[str, str] | None
    holds: str
    status: str
    folder: Path | None  # the output folder, or the working one of a running step
    manifest: dict[str, Any] = field(default_factory=dict)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


@dataclass
class PageData:
    workdir: Path
    recipe: str
    profile: str | None
    paper: str | None
    label: str | None
    ablated: list[str]
    started: float
    running: bool
    steps: list[StepView]


@dataclass(frozen=True)
class Score:
    step: str
    stage: str
    direction: str
    metric: str
    score: float
    signature: str


def scores(steps: list[StepView]) -> list[Score]:
    rows = []
    for view in steps:
        for name, value in view.manifest.get("metrics", {}).items():
            if isinstance(value, dict) and "signature" in value:
                stage, direction = view.stage or (view.id, str(value.get("direction") or view.id))
                score = float(value["score"])
                rows.append(Score(view.id, stage, direction, name, score, str(value["signature"])))
    return rows


def _stage_cell(row: Score, before: Score | None, p_value: float | None) -> dict[str, str]:
    cell = {
        "anchor": anchor(row.step),
        "score": f"{row.score:.2f}",
        "change": "",
        "css": "",
        "p": "",
    }
    if before is not None:
        change = row.score - before.score
        cell["change"] = f"({change:+.2f})"
        cell["css"] = "up" if change > 0 else ("down" if change < 0 else "")
        if p_value is not None:
            cell["p"] = f"p={p_value:.3f}" + ("*" if p_value < 0.05 else "")
    return cell


def stage_table(
    data: PageData, p_values: dict[tuple[str, str], float] | None = None
) -> dict[str, Any] | None:
    """A row per stage, a column per (direction, metric): each cell the score, its change from
    the stage above and the p-value of that change; None when no step has scored yet."""
    rows = [r for r in scores(data.steps) if any(s.id == r.step and s.stage for s in data.steps)]
    rows = rows or scores(data.steps)
    if not rows:
        return None
    stages = list(dict.fromkeys(r.stage for r in rows))
    columns = list(dict.fromkeys((r.direction, r.metric) for r in rows))
    cell = {(r.stage, r.direction, r.metric): r for r in rows}
    body = []
    for i, stage in enumerate(stages):
        cells: list[dict[str, Any] | None] = []
        for direction, metric in columns:
            row = cell.get((stage, direction, metric))
            if row is None:
                cells.append(None)
                continue
            earlier = (cell.get((e, direction, metric)) for e in reversed(stages[:i]))
            before = next((b for b in earlier if b is not None), None)
            cells.append(_stage_cell(row, before, (p_values or {}).get((row.step, row.metric))))
        body.append({"stage": stage, "cells": cells})
    return {
        "columns": [f"{d} {m}" for d, m in columns],
        "rows": body,
        "signatures": signatures(rows),
    }


def signatures(rows: list[Score]) -> list[dict[str, str]]:
    """Each metric's signatures, with the directions that each was scored in (two BLEU
    signatures are ``tok:char`` for en-ja and ``tok:13a`` for ja-en)."""
    directions: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        found = directions.setdefault((row.metric, row.signature), [])
        if row.direction not in found:
            found.append(row.direction)
    return [
        {"metric": metric, "directions": ", ".join(found), "signature": signature}
        for (metric, signature), found in directions.items()
    ]


CURVE_GROUPS = (
    ("loss", lambda k: k.endswith("/loss")),
    ("validation", lambda k: k.startswith("valid/") and k.split("/")[1] in ("bleu", "chrf", "ppl")),
    ("learning rate", lambda k: k == "train/lr"),
)


def curves(data: PageData) -> list[dict[str, Any]]:
    """A block per step that logged curves: its loss, validation and learning-rate charts, a
    series drawn in the same colour in every chart."""
    models = []
    drawn = [k for v in data.steps for k in v.curves if any(w(k) for _, w in CURVE_GROUPS)]
    colours = series_colours(drawn)
    for view in data.steps:
        if not view.curves:
            continue
        charts = []
        for name, wanted in CURVE_GROUPS:
            series = {k: v for k, v in view.curves.items() if wanted(k)}
            title = f"{view.id}: {name}"
            chart = line_chart_data(series, title, colours=colours) if series else None
            if chart is not None:
                charts.append(chart)
        models.append(
            {
                "id": view.id,
                "anchor": anchor(view.id),
                "block": anchor(view.id, "curves"),
                "running": view.status == "running",
                "charts": charts,
            }
        )
    return models


def funnel_steps(steps: list[StepView]) -> list[StepView]:
    """The filtering steps: those that count pairs in, out and dropped by some filter or cut
    (not the steps that rewrite every pair they read: post-processing, truecasing, tagging)."""
    return [
        v
        for v in steps
        if "pairs_in" in (counts := v.manifest.get("counts", {}))
        and "pairs_out" in counts
        and any(key.startswith("dropped.") for key in counts)
    ]


def _reject_anchor(view: StepView, name: str) -> str:
    return f"{anchor(view.id, 'rejects')}-{slug(name)}"


def funnel(data: PageData) -> dict[str, Any] | None:
    """The pairs out of each filtering step, and for each that dropped some, the pairs left
    after each filter (linked to what it dropped); None before any filtering step finished."""
    chosen = funnel_steps(data.steps)
    if not chosen:
        return None
    blocks = []
    for view in chosen:
        counts = view.manifest["counts"]
        if counts["pairs_out"] == counts["pairs_in"]:
            continue  # nothing dropped: the overview shows its count
        left = float(counts["pairs_in"])
        rows = [("in", left, "")]
        for key, value in counts.items():
            if key.startswith("dropped."):
                left -= float(value)
                name = key[len("dropped.") :]
                rows.append((f"after {name}", left, _reject_anchor(view, name) if value else ""))
        rows.append(("out", float(counts["pairs_out"]), ""))
        kept = 100.0 * counts["pairs_out"] / max(counts["pairs_in"], 1)
        blocks.append(
            {
                "id": view.id,
                "anchor": anchor(view.id),
                "kept": f"{counts['pairs_out']:,} of {counts['pairs_in']:,} pairs kept "
                f"({kept:.1f} %)",
                "chart": bar_chart_data(rows, f"{view.id}: pairs left after each filter"),
            }
        )
    overview = [(v.id, float(v.manifest["counts"]["pairs_out"]), anchor(v.id)) for v in chosen]
    return {
        "overview": bar_chart_data(overview, "pairs out of each filtering step"),
        "blocks": blocks,
    }


def _reject_rows(folder: Path, name: str) -> list[dict[str, Any]]:
    """The first rejected pairs a filter kept, each side cut to ``REJECT_CELL`` characters."""
    path = folder / "rejects" / f"{name}.tsv"
    if not path.exists():
        return []
    scores_path = folder / "rejects" / f"{name}.scores"
    kept = scores_path.read_text(encoding="utf-8").splitlines() if scores_path.exists() else []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for i, line in enumerate(handle):
            if i >= REJECT_ROWS:
                break
            sides = [
                {"text": text, "title": ""}
                if len(text) <= REJECT_CELL
                else {"text": text[:REJECT_CELL] + "…", "title": text}
                for text in line.rstrip("\n").split("\t")
            ]
            rows.append({"sides": sides, "score": kept[i] if i < len(kept) else ""})
    return rows


def _setting(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)


def _entry_settings(config: dict[str, Any], name: str) -> dict[str, Any]:
    """The settings behind the drops counted as ``dropped.<name>``: a clean step's chain entry
    of that label (its threshold, its ``keep`` rule), or a selecting step's settings."""
    entries = config.get("filters")
    if not isinstance(entries, list):
        return {k: v for k, v in config.items() if v is not None}
    try:
        specs = make_specs(entries)
    except (MtcoreError, KeyError, TypeError, ValueError):
        return {}
    spec = next((s for s in specs if s.label == name), None)
    if spec is None:
        return {}
    keep = spec.get("keep")
    return {"name": spec.name, **spec.values(), **({} if keep is None else {"keep": keep})}


def _cut(view: StepView, name: str) -> str:
    """What made a filter's or a cut's drops: its settings and, for a ranked cut, the worst
    score it kept (the metric ``cut_score.<filter>`` of a clean step, ``cut_score`` of a
    selecting step's rank cut)."""
    settings = _entry_settings(view.manifest.get("config", {}), name)
    text = ", ".join(f"{k}: {_setting(v)}" for k, v in settings.items())
    metrics = view.manifest.get("metrics", {})
    worst = metrics.get(f"cut_score.{name}")
    if worst is None and name == "rank" and "filters" not in view.manifest.get("config", {}):
        worst = metrics.get("cut_score")
    if isinstance(worst, int | float):
        text += f"; worst score kept {nice(float(worst))}"
    return text if len(text) <= REJECT_CELL else text[:REJECT_CELL] + "…"


def rejects(data: PageData) -> list[dict[str, Any]]:
    """A block per filter or cut that dropped pairs: what it was set to, a sample of them
    with the score each was dropped by ("not recorded" where the step kept none: a workdir
    older than the scores, a filter without a score), or that no sample was kept."""
    blocks = []
    for view in funnel_steps(data.steps):
        if view.folder is None:
            continue
        for key, dropped in view.manifest["counts"].items():
            if not key.startswith("dropped.") or not dropped:
                continue
            name = key[len("dropped.") :]
            rows = _reject_rows(view.folder, name)
            blocks.append(
                {
                    "id": view.id,
                    "name": name,
                    "anchor": anchor(view.id),
                    "block": _reject_anchor(view, name),
                    "dropped": f"{dropped:,}",
                    "cut": _cut(view, name),
                    "rows": rows,
                    "scored": any(row["score"] for row in rows),
                }
            )
    return blocks


def _size(manifest: dict[str, Any]) -> int:
    return sum(int(v[0]) for v in manifest.get("files", {}).values() if v)


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _cache_state(view: StepView) -> str:
    cache = {"ran": "ran", "cached": "from cache", "done": "complete"}.get(view.status, "")
    if view.manifest.get("resumed"):
        cache += " (resumed)"
    if view.manifest.get("requeues"):  # its job stopped at a time limit or a preemption, requeued
        cache += f" (requeued {int(view.manifest['requeues'])}x)"
    return cache


def step_rows(data: PageData) -> list[dict[str, Any]]:
    """A row per step: status, cache state, seconds, resources held, output size, inputs and
    counts."""
    rows = []
    for view in data.steps:
        m = view.manifest
        seconds = m.get("seconds")
        rows.append(
            {
                "id": view.id,
                "anchor": anchor(view.id),
                "curves": anchor(view.id, "curves") if view.curves else "",
                "kind": view.kind,
                "colour": STATUS_COLOURS.get(view.status, "#ddd"),
                "status": view.status,
                "cache": _cache_state(view),
                "seconds": "" if seconds is None else f"{float(seconds):.1f}",
                "holds": view.holds,
                "output": _bytes(_size(m)) if m else "",
                "inputs": [
                    {"id": dep, "anchor": anchor(dep)}
                    for dep in dict.fromkeys(view.inputs.values())
                ],
                "counts": ", ".join(
                    f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
                    for k, v in m.get("counts", {}).items()
                ),
            }
        )
    return rows


def _measured(view: StepView) -> float | None:
    """The seconds a finished step took when it ran (its manifest keeps them when a later run
    takes it from the cache)."""
    seconds = view.manifest.get("seconds")
    return float(seconds) if isinstance(seconds, int | float) else None


def longest_steps(data: PageData) -> dict[str, Any] | None:
    """The 15 longest steps by the time each took when it ran, a cached one labelled so."""
    timed = sorted(
        (
            (view.id + (" (cached)" if view.status == "cached" else ""), seconds, anchor(view.id))
            for view in data.steps
            if (seconds := _measured(view)) is not None
        ),
        key=lambda row: -row[1],
    )[:15]
    return bar_chart_data(timed, "longest steps (seconds, measured when each ran)", " s")


def _timing(data: PageData) -> str:
    """The steps' measured time, and how much of it this run spent where some came from the
    cache."""
    measured = [(view.status, s) for view in data.steps if (s := _measured(view)) is not None]
    total = sum(s for _, s in measured)
    text = f"{total:,.0f} s of step time measured when the steps ran"
    cached = [s for status, s in measured if status == "cached"]
    if cached:
        text += (
            f" ({sum(s for status, s in measured if status == 'ran'):,.0f} s in this run; "
            f"{len(cached)} steps from the cache, {sum(cached):,.0f} s when they ran)"
        )
    return text


def header(data: PageData) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for view in data.steps:
        counts[view.status] = counts.get(view.status, 0) + 1
    return {
        "title": data.recipe + (f" ({data.label})" if data.label else ""),
        "profile": data.profile or "",
        "paper": data.paper or "",
        "ablated": ", ".join(data.ablated),
        "steps": len(data.steps),
        "summary": ", ".join(f"{n} {status}" for status, n in counts.items()),
        "timing": _timing(data),
        "workdir": str(data.workdir),
        "written": time.strftime("%Y-%m-%d %H:%M:%S"),
        "state": "a run is going on: rebuild with `mtcore report`"
        if data.running
        else "no run now",
    }
