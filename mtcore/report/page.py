"""``report.html``: a run as one self-contained page (inline CSS and SVG, no script, nothing
fetched at view time), rebuilt from the workdir alone, also while a run is going on.

What it reads: the plan the runner writes when a run starts (``plan.json``: every step with its
kind, folder, inputs, stage and the resources it holds), each finished step's
``manifest.json``, the working folders of steps still running, the clean steps' samples of
rejected pairs and, through each step kind's :meth:`mtcore.contracts.step.Step.curves`, the
training curves a step has logged so far. Sections: the stage table (with each stage's change
and, where the evaluate steps kept their hypotheses, the paired bootstrap p-value against the
stage above it), training curves, the data funnel, rejected samples, the plan graph and the
step table (status, cache state, seconds, resources held, output size)."""

from __future__ import annotations

import fcntl
import html
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtcore.contracts.errors import MtcoreError
from mtcore.exec.files import replace_file
from mtcore.run.plan_file import plan_file

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from mtcore.contracts.registry import Registry
    from mtcore.run.results import RunResult

PAGE_FILE = "report.html"
REJECT_ROWS = 8  # rejected pairs shown per filter (the step keeps more: rejects/<filter>.tsv)
PALETTE = ("#4472c4", "#ed7d31", "#70ad47", "#a5a5a5", "#ffc000", "#5b9bd5", "#264478", "#9e480e")
STATUS_COLOURS = {
    "ran": "#70ad47",
    "cached": "#a9d18e",
    "done": "#a9d18e",
    "running": "#ffc000",
    "stopped": "#f4b183",
    "failed": "#e04040",
    "pending": "#d9d9d9",
}


def page_file(workdir: Path, label: str | None = None) -> Path:
    return workdir / (PAGE_FILE if label is None else f"report.{label}.html")


# --- what the page shows ---------------------------------------------------------------------


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


def _run_going_on(workdir: Path) -> bool:
    """Whether a run holds the workdir's lock now (the runner's ``flock``)."""
    path = workdir / ".lock"
    if not path.exists():
        return False
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def collect(
    workdir: Path,
    registry: Registry,
    label: str | None = None,
    result: RunResult | None = None,
    running: bool | None = None,
) -> PageData:
    """What the page shows, read from ``workdir``; ``result`` (a run that just ended) gives
    each finished step's status (ran or cached) and marks the others failed or not reached."""
    path = plan_file(workdir, label)
    if not path.exists():
        raise MtcoreError(
            f"{path} does not exist: the page is built from the plan an `mtcore run` writes when "
            f"it starts; run the recipe with --workdir {workdir} first"
            + ("" if label is None else f" (label {label!r}: a variant of `mtcore compare`)")
        )
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MtcoreError(f"{path}: not a plan written by mtcore ({exc})") from None
    going = _run_going_on(workdir) if running is None else running
    ended = {} if result is None else {r.planned.id: r.status for r in result.results}
    steps = []
    for entry in plan["steps"]:
        final = workdir / "steps" / entry["dir"]
        work = workdir / "steps" / ".partial" / entry["dir"]
        manifest: dict[str, Any] = {}
        folder: Path | None = None
        if (final / "manifest.json").exists():
            folder = final
            manifest = json.loads((final / "manifest.json").read_text(encoding="utf-8"))
            status = ended.get(entry["id"], "done")
        elif work.exists():
            folder = work
            status = "running" if going else ("failed" if result is not None else "stopped")
        else:
            status = "pending"
        view = StepView(
            entry["id"],
            entry["kind"],
            entry["dir"],
            dict(entry.get("inputs", {})),
            None if entry.get("stage") is None else (entry["stage"][0], entry["stage"][1]),
            str(entry.get("holds", "")),
            status,
            folder,
            manifest,
        )
        if folder is not None:
            view.curves = _curves(registry, view.kind, folder)
        steps.append(view)
    return PageData(
        workdir,
        str(plan.get("recipe", "")),
        plan.get("profile"),
        plan.get("paper"),
        label,
        list(plan.get("ablated", [])),
        float(plan.get("started", 0)),
        going,
        steps,
    )


def _curves(registry: Registry, kind: str, folder: Path) -> dict[str, list[tuple[int, float]]]:
    try:
        cls = registry.load("steps", kind)
    except MtcoreError:
        return {}
    return cls.curves(folder)


# --- drawing ----------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def _anchor(step_id: str, section: str = "step") -> str:
    """The id of a step's row (``step-<id>``) or of its block in another section."""
    return f"{section}-{_slug(step_id)}"


def _nice(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 1:
        return f"{value:.3g}"
    return f"{value:.2e}" if magnitude < 0.01 else f"{value:.3f}"


def _ticks(low: float, high: float, count: int = 4, whole: bool = False) -> list[float]:
    """Round tick values between ``low`` and ``high``; ``whole``: integers only (updates)."""
    if high <= low:
        return [low]
    step = (high - low) / count
    power = 10 ** math.floor(math.log10(step))
    step = min((m * power for m in (1, 2, 5, 10) if m * power >= step), default=step)
    if whole:
        step = max(step, 1.0)
    first = math.ceil(low / step) * step
    out = []
    value = first
    while value <= high + step * 1e-9:
        out.append(value)
        value += step
    return out


def line_chart(
    series: dict[str, list[tuple[int, float]]], title: str, x_label: str = "update"
) -> str:
    """An SVG line chart, a line per series, with axes, ticks and a legend."""
    width, height, left, right, top, bottom = 460, 230, 62, 12, 26, 40
    points = [p for line in series.values() for p in line]
    if not points:
        return ""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - abs(y0) * 0.1 - 1e-9, y1 + abs(y1) * 0.1 + 1e-9
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * plot_h

    out = [
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{left}" y="16" class="title">{_e(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="frame"/>',
    ]
    for y in _ticks(y0, y1):
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
            'class="grid"/>'
        )
        out.append(
            f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" class="tick" '
            f'text-anchor="end">{_nice(y)}</text>'
        )
    for x in _ticks(x0, x1, whole=True):
        out.append(
            f'<text x="{sx(x):.1f}" y="{top + plot_h + 14}" class="tick" '
            f'text-anchor="middle">{_nice(x)}</text>'
        )
    out.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" class="tick" '
        f'text-anchor="middle">{_e(x_label)}</text>'
    )
    for i, (name, line) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line)
        if len(line) > 1:
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.6"/>'
            )
        for x, y in line if len(line) <= 40 else line[-1:]:
            out.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.2" fill="{colour}">'
                f"<title>{_e(name)} @ {x}: {_nice(y)}</title></circle>"
            )
        out.append(
            f'<text x="{left + plot_w - 4}" y="{top + 14 + 13 * i}" text-anchor="end" '
            f'class="legend" fill="{colour}">{_e(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def bar_chart(rows: list[tuple[str, float, str]], title: str, unit: str = "") -> str:
    """Horizontal SVG bars: (label, value, link target or "") per row."""
    if not rows:
        return ""
    width, bar, left = 560, 18, 190
    height = 28 + bar * len(rows) + 6
    most = max(value for _, value, _ in rows) or 1.0
    out = [
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="4" y="16" class="title">{_e(title)}</text>',
    ]
    for i, (label, value, target) in enumerate(rows):
        y = 26 + i * bar
        length = (width - left - 90) * value / most
        text = (
            f'<text x="{left - 6}" y="{y + 13}" text-anchor="end" class="tick">{_e(label)}</text>'
        )
        if target:
            text = f'<a href="#{_e(target)}">{text}</a>'
        out.append(text)
        out.append(
            f'<rect x="{left}" y="{y + 3}" width="{max(length, 1):.1f}" height="{bar - 6}" '
            f'fill="{PALETTE[0]}"><title>{_e(label)}: {_nice(value)}{unit}</title></rect>'
        )
        out.append(
            f'<text x="{left + length + 4:.1f}" y="{y + 13}" class="tick">'
            f"{_nice(value)}{_e(unit)}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def plan_graph(steps: list[StepView]) -> str:
    """The plan as layers (a step one column right of its deepest input), a box per step
    coloured by status, linked to its row in the step table."""
    by_id = {s.id: s for s in steps}
    depth: dict[str, int] = {}
    for view in steps:  # plan order: inputs first
        parents = [p for p in view.inputs.values() if p in by_id]
        depth[view.id] = 1 + max((depth.get(p, 0) for p in parents), default=-1)
    columns: dict[int, list[str]] = {}
    for view in steps:
        columns.setdefault(depth[view.id], []).append(view.id)
    box_w, box_h, gap_x, gap_y = 150, 22, 40, 8
    where = {}
    for column, ids in columns.items():
        for row, step_id in enumerate(ids):
            where[step_id] = (8 + column * (box_w + gap_x), 8 + row * (box_h + gap_y))
    width = 16 + len(columns) * (box_w + gap_x)
    height = 16 + max(len(ids) for ids in columns.values()) * (box_h + gap_y)
    out = [
        f'<svg class="graph" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for view in steps:
        x, y = where[view.id]
        for parent in dict.fromkeys(view.inputs.values()):
            if parent not in where:
                continue
            px, py = where[parent]
            out.append(
                f'<line x1="{px + box_w}" y1="{py + box_h / 2}" x2="{x}" '
                f'y2="{y + box_h / 2}" class="edge"/>'
            )
    for view in steps:
        x, y = where[view.id]
        seconds = view.manifest.get("seconds")
        tip = f"{view.id} ({view.kind}): {view.status}"
        if isinstance(seconds, int | float):
            tip += f", {seconds:.1f} s"
        colour = STATUS_COLOURS.get(view.status, "#d9d9d9")
        label = view.id if len(view.id) <= 21 else view.id[:20] + "…"
        out.append(
            f'<a href="#{_anchor(view.id)}"><rect x="{x}" y="{y}" width="{box_w}" '
            f'height="{box_h}" rx="4" fill="{colour}" class="node"><title>{_e(tip)}</title>'
            f'</rect><text x="{x + 6}" y="{y + 15}" class="nodetext">{_e(label)}</text></a>'
        )
    out.append("</svg>")
    return "".join(out)


# --- sections ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Score:
    step: str
    stage: str
    direction: str
    metric: str
    score: float
    signature: str


def _scores(steps: list[StepView]) -> list[_Score]:
    rows = []
    for view in steps:
        for name, value in view.manifest.get("metrics", {}).items():
            if isinstance(value, dict) and "signature" in value:
                stage, direction = view.stage or (view.id, str(value.get("direction") or view.id))
                rows.append(
                    _Score(
                        view.id,
                        stage,
                        direction,
                        name,
                        float(value["score"]),
                        str(value["signature"]),
                    )
                )
    return rows


def _texts(workdir: Path, ref: dict[str, str], lang: str | None = None) -> list[str]:
    from mtcore.data.corpus import Corpus

    corpus = Corpus.open(workdir / "steps" / f"{ref['step']}-{ref['hash']}" / ref["output"])
    column = corpus.langs.index(lang) if lang else 0
    return [pair[column] for pair in corpus]


def _paired_test(
    workdir: Path, registry: Registry, old: dict[str, Any], new: dict[str, Any]
) -> dict[str, float]:
    """sacrebleu's paired bootstrap resampling (Koehn 2004; 1,000 samples, sacrebleu's fixed
    seed) of two evaluate steps on the same references: metric -> p-value of the change, for
    the metrics that have a paired test (their plugin's ``sacrebleu``)."""
    from sacrebleu.significance import PairedTest

    from mtcore.system.metrics import build_metrics

    if old["inputs"].get("ref") != new["inputs"].get("ref") or "hyp" not in old["inputs"]:
        return {}
    scored = [v for v in new["metrics"].values() if isinstance(v, dict) and "direction" in v]
    if not scored:
        return {}
    lang = str(scored[0]["direction"]).split("-")[-1]
    metrics: dict[str, Any] = {}
    for metric in build_metrics(registry, new.get("config", {}).get("metrics", [])):
        name = getattr(metric, "score_name", None)
        if hasattr(metric, "sacrebleu") and name in new["metrics"]:
            metrics[str(name)] = metric.sacrebleu(lang)
    if not metrics:
        return {}
    refs = _texts(workdir, new["inputs"]["ref"], lang)
    systems: list[tuple[str, Any]] = [
        ("a", _texts(workdir, old["inputs"]["hyp"])),
        ("b", _texts(workdir, new["inputs"]["hyp"])),
    ]
    if systems[0][1] == systems[1][1]:
        # the same output (a stage that changed nothing): no change to test; sacrebleu's
        # bootstrap would give such a pair its smallest p-value, 1/1001
        return dict.fromkeys(metrics, 1.0)
    _, results = PairedTest(systems, metrics, [refs], test_type="bs", n_samples=1000)()
    pairs = [pair for name, pair in results.items() if name != "System"]
    found = {}
    for name, (_, second) in zip(metrics, pairs, strict=True):
        p_value = getattr(second, "p_value", None)
        if p_value is not None:
            found[name] = float(p_value)
    return found


def significance(data: PageData, registry: Registry) -> dict[tuple[str, str], float]:
    """(step, metric) -> p-value of its change from the stage above it in the same direction,
    for finished stage steps; cached in ``.page/significance.json`` by the two steps' folders."""
    cache_path = data.workdir / ".page" / "significance.json"
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        cache = {}
    found: dict[tuple[str, str], float] = {}
    last: dict[str, StepView] = {}
    changed = False
    for view in data.steps:
        if view.stage is None or not view.manifest:
            continue
        before = last.get(view.stage[1])
        last[view.stage[1]] = view
        if before is None:
            continue
        key = f"{before.dir}:{view.dir}"
        if key not in cache:
            try:
                cache[key] = _paired_test(data.workdir, registry, before.manifest, view.manifest)
            except (MtcoreError, OSError, ValueError, KeyError) as exc:
                log.info(
                    "run page: no significance test of %s against %s: %s", view.id, before.id, exc
                )
                cache[key] = {}
            changed = True
        for metric, p_value in cache[key].items():
            found[(view.id, metric)] = p_value
    if changed:
        cache_path.parent.mkdir(exist_ok=True)
        cache_path.write_text(json.dumps(cache), encoding="utf-8")
    return found


def stage_section(data: PageData, p_values: dict[tuple[str, str], float] | None = None) -> str:
    rows = [r for r in _scores(data.steps) if any(s.id == r.step and s.stage for s in data.steps)]
    if not rows:
        rows = _scores(data.steps)
    if not rows:
        return "<p>No step has scored the system yet.</p>"
    stages = list(dict.fromkeys(r.stage for r in rows))
    columns = list(dict.fromkeys((r.direction, r.metric) for r in rows))
    cell = {(r.stage, r.direction, r.metric): r for r in rows}
    head = "".join(f"<th>{_e(d)} {_e(m)}</th>" for d, m in columns)
    body = []
    for i, stage in enumerate(stages):
        cells = []
        for direction, metric in columns:
            row = cell.get((stage, direction, metric))
            before = None
            for earlier in reversed(stages[:i]):
                before = cell.get((earlier, direction, metric))
                if before is not None:
                    break
            if row is None:
                cells.append("<td></td>")
                continue
            text = f'<a href="#{_anchor(row.step)}">{row.score:.2f}</a>'
            if before is not None:
                change = row.score - before.score
                css = "up" if change > 0 else ("down" if change < 0 else "")
                text += f' <span class="{css}">({change:+.2f})</span>'
                p_value = (p_values or {}).get((row.step, row.metric))
                if p_value is not None:
                    mark = "*" if p_value < 0.05 else ""
                    text += f' <span class="p">p={p_value:.3f}{mark}</span>'
            cells.append(f'<td class="num">{text}</td>')
        body.append(f"<tr><th>{_e(stage)}</th>{''.join(cells)}</tr>")
    signatures = dict.fromkeys((r.metric, r.signature) for r in rows)
    sigs = "".join(f"<li><b>{_e(m)}</b>: <code>{_e(s)}</code></li>" for m, s in signatures)
    return (
        f'<table class="stages"><tr><th>stage</th>{head}</tr>{"".join(body)}</table>'
        '<p class="note">Each cell: the score, its change from the stage above and the '
        "p-value of that change by sacrebleu's paired bootstrap resampling (1,000 samples; "
        "* below 0.05), where the two stages share their references and the metric has a "
        "paired test. Against an ablated variant: "
        "<code>scripts/stage_significance.py RECIPE -w WORKDIR --ablate STEP</code>.</p>"
        f'<ul class="sigs">{sigs}</ul>'
    )


def curves_section(data: PageData) -> str:
    parts = []
    for view in data.steps:
        if not view.curves:
            continue
        groups = {
            "loss": {k: v for k, v in view.curves.items() if k.endswith("/loss")},
            "validation": {
                k: v
                for k, v in view.curves.items()
                if k.startswith("valid/") and k.split("/")[1] in ("bleu", "chrf", "ppl")
            },
            "learning rate": {k: v for k, v in view.curves.items() if k == "train/lr"},
        }
        charts = "".join(
            line_chart(series, f"{view.id}: {name}") for name, series in groups.items() if series
        )
        state = "" if view.status != "running" else " (running: so far)"
        parts.append(
            f'<div class="model" id="{_anchor(view.id, "curves")}"><h3><a href="#'
            f'{_anchor(view.id)}">{_e(view.id)}</a>{state}</h3>{charts}</div>'
        )
    return "".join(parts) or "<p>No training has logged a curve yet.</p>"


def _funnel_steps(steps: list[StepView]) -> list[StepView]:
    return [
        v
        for v in steps
        if "pairs_in" in v.manifest.get("counts", {}) and "pairs_out" in v.manifest["counts"]
    ]


def funnel_section(data: PageData) -> str:
    chosen = _funnel_steps(data.steps)
    if not chosen:
        return "<p>No filtering step has finished yet.</p>"
    parts = []
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
                target = f"{_anchor(view.id, 'rejects')}-{_slug(name)}" if value else ""
                rows.append((f"after {name}", left, target))  # linked to what it dropped
        rows.append(("out", float(counts["pairs_out"]), ""))
        kept = 100.0 * counts["pairs_out"] / max(counts["pairs_in"], 1)
        parts.append(
            f'<div class="funnel"><h3><a href="#{_anchor(view.id)}">{_e(view.id)}</a>: '
            f"{counts['pairs_out']:,} of {counts['pairs_in']:,} pairs kept ({kept:.1f} %)</h3>"
            f"{bar_chart(rows, f'{view.id}: pairs left after each filter')}</div>"
        )
    overview = [(v.id, float(v.manifest["counts"]["pairs_out"]), _anchor(v.id)) for v in chosen]
    return bar_chart(overview, "pairs out of each filtering step") + "".join(parts)


def _reject_rows(folder: Path, name: str) -> list[tuple[list[str], str]]:
    path = folder / "rejects" / f"{name}.tsv"
    if not path.exists():
        return []
    scores_path = folder / "rejects" / f"{name}.scores"
    scores = scores_path.read_text(encoding="utf-8").splitlines() if scores_path.exists() else []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for i, line in enumerate(handle):
            if i >= REJECT_ROWS:
                break
            rows.append((line.rstrip("\n").split("\t"), scores[i] if i < len(scores) else ""))
    return rows


def _cell(text: str, most: int = 240) -> str:
    """A table cell of a rejected side: long text cut (the whole in its tooltip)."""
    if len(text) <= most:
        return f"<td>{_e(text)}</td>"
    return f'<td title="{_e(text)}">{_e(text[:most])}…</td>'


def rejects_section(data: PageData) -> str:
    parts = []
    for view in _funnel_steps(data.steps):
        if view.folder is None:
            continue
        for key, dropped in view.manifest["counts"].items():
            if not key.startswith("dropped."):
                continue
            if not dropped:
                continue
            name = key[len("dropped.") :]
            rows = _reject_rows(view.folder, name)
            anchor = f"{_anchor(view.id, 'rejects')}-{_slug(name)}"
            if not rows:
                parts.append(
                    f'<h3 id="{_e(anchor)}">{_e(view.id)} / {_e(name)}: {dropped:,} '
                    "dropped, no sample</h3>"
                )
                continue
            body = "".join(
                "<tr>"
                + "".join(_cell(text) for text in fields)
                + f'<td class="num">{_e(score)}</td></tr>'
                for fields, score in rows
            )
            parts.append(
                f'<h3 id="{_e(anchor)}"><a href="#{_anchor(view.id)}">{_e(view.id)}</a> / '
                f"{_e(name)}: {dropped:,} dropped; a sample</h3>"
                f'<table class="rejects"><tr><th colspan="{len(rows[0][0])}">pair</th>'
                f"<th>score</th></tr>{body}</table>"
            )
    return "".join(parts) or "<p>No filter has rejected a pair yet.</p>"


def _size(manifest: dict[str, Any]) -> int:
    return sum(int(v[0]) for v in manifest.get("files", {}).values() if v)


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def steps_section(data: PageData) -> str:
    rows = []
    for view in data.steps:
        m = view.manifest
        seconds = m.get("seconds")
        inputs = ", ".join(
            f'<a href="#{_anchor(dep)}">{_e(dep)}</a>'
            for dep in dict.fromkeys(view.inputs.values())
        )
        counts = ", ".join(
            f"{_e(k)} {v:,}" if isinstance(v, int) else f"{_e(k)} {_e(v)}"
            for k, v in m.get("counts", {}).items()
        )
        cache = {"ran": "ran", "cached": "from cache", "done": "complete"}.get(view.status, "")
        if m.get("resumed"):
            cache += " (resumed)"
        if m.get("requeues"):  # its job stopped at a time limit or a preemption, queued again
            cache += f" (requeued {int(m['requeues'])}x)"
        link = ""
        if view.curves:
            link = f' <a href="#{_anchor(view.id, "curves")}">curves</a>'
        rows.append(
            f'<tr id="{_anchor(view.id)}"><td><code>{_e(view.id)}</code>{link}</td>'
            f"<td>{_e(view.kind)}</td>"
            f'<td><span class="dot" style="background:{STATUS_COLOURS.get(view.status, "#ddd")}">'
            f"</span>{_e(view.status)}</td><td>{_e(cache)}</td>"
            f'<td class="num">{"" if seconds is None else f"{float(seconds):.1f}"}</td>'
            f"<td>{_e(view.holds)}</td>"
            f'<td class="num">{_bytes(_size(m)) if m else ""}</td>'
            f'<td>{inputs}</td><td class="counts">{counts}</td></tr>'
        )
    timed = sorted(
        (
            (v.id, float(v.manifest["seconds"]), _anchor(v.id))
            for v in data.steps
            if isinstance(v.manifest.get("seconds"), int | float) and v.status != "cached"
        ),
        key=lambda row: -row[1],
    )[:15]
    return (
        bar_chart(timed, "longest steps of this run (seconds)", " s")
        + '<table class="steps"><tr><th>step</th><th>kind</th><th>status</th><th>cache</th>'
        "<th>seconds</th><th>holds</th><th>output</th><th>inputs</th><th>counts</th></tr>"
        + "".join(rows)
        + "</table>"
    )


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}
header{background:#264478;color:#fff;padding:10px 20px}
header h1{margin:0;font-size:20px} header p{margin:2px 0}
nav{position:sticky;top:0;background:#eef2f8;padding:6px 20px;border-bottom:1px solid #ccd}
nav a{margin-right:14px} main{padding:0 20px 40px}
section{margin-top:18px;scroll-margin-top:40px}
h2{border-bottom:2px solid #264478;padding-bottom:2px}
table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ccc;padding:3px 6px;
vertical-align:top;text-align:left} .num{text-align:right;white-space:nowrap}
.p{color:#555;font-size:11px} .up{color:#2a7d2a} .down{color:#c03030}
.note{color:#555;font-size:12px}
.counts{font-size:12px;max-width:420px} .rejects td{max-width:520px;font-size:12px}
.chart{margin:4px 10px 4px 0;background:#fff} .chart .title{font-size:12px;font-weight:600}
.tick{font-size:10px;fill:#444} .legend{font-size:11px} .frame{fill:none;stroke:#999}
.grid{stroke:#e4e4e4} .edge{stroke:#9aa;stroke-width:1} .nodetext{font-size:11px}
.node{stroke:#667} .model,.funnel{display:inline-block;vertical-align:top;margin-right:12px}
.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:5px}
.graphbox{overflow:auto;max-height:640px;border:1px solid #ddd} code{font-size:12px}
"""

SECTIONS = (
    ("stages", "Scores by stage"),
    ("curves", "Training curves"),
    ("funnel", "Data funnel"),
    ("rejects", "Rejected samples"),
    ("graph", "Plan graph"),
    ("steps", "Steps"),
)


def render_page(data: PageData, p_values: dict[tuple[str, str], float] | None = None) -> str:
    counts: dict[str, int] = {}
    for view in data.steps:
        counts[view.status] = counts.get(view.status, 0) + 1
    total = sum(
        float(v.manifest.get("seconds", 0)) for v in data.steps if v.status not in ("cached",)
    )
    state = "a run is going on: rebuild with `mtcore report`" if data.running else "no run now"
    title = data.recipe + (f" ({data.label})" if data.label else "")
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    bodies = {
        "stages": stage_section(data, p_values),
        "curves": curves_section(data),
        "funnel": funnel_section(data),
        "rejects": rejects_section(data),
        "graph": f'<div class="graphbox">{plan_graph(data.steps)}</div>',
        "steps": steps_section(data),
    }
    nav = "".join(f'<a href="#{key}">{_e(name)}</a>' for key, name in SECTIONS)
    sections = "".join(
        f'<section id="{key}"><h2>{_e(name)}</h2>{bodies[key]}</section>' for key, name in SECTIONS
    )
    profile = f" — profile <code>{_e(data.profile)}</code>" if data.profile else ""
    paper = f"<p>Replicates: {_e(data.paper)}</p>" if data.paper else ""
    ablated = f"<p>Ablated: {_e(', '.join(data.ablated))}</p>" if data.ablated else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        # the page runs no script and loads nothing: a string that escaped escaping cannot either
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>mtcore: {_e(title)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{_e(title)}{profile}</h1>{paper}{ablated}"
        f"<p>{len(data.steps)} steps: {_e(summary)}; {total:,.0f} s of step time. "
        f"Workdir <code>{_e(data.workdir)}</code>; page written "
        f"{_e(time.strftime('%Y-%m-%d %H:%M:%S'))}, {_e(state)}.</p></header>"
        f"<nav>{nav}</nav><main>{sections}</main></body></html>"
    )


def write_page(
    workdir: Path,
    registry: Registry,
    label: str | None = None,
    result: RunResult | None = None,
    running: bool | None = None,
) -> Path:
    """Builds ``report.html`` (``report.<label>.html``) from the workdir; returns its path."""
    data = collect(workdir, registry, label, result, running)
    path = page_file(workdir, label)
    replace_file(path, render_page(data, significance(data, registry)))
    return path
