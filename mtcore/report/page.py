"""``report.html``: a run as one self-contained page (inline CSS and SVG, no script, nothing
fetched at view time), rebuilt from the workdir alone, also while a run is going on.

What it reads: the plan the runner writes when a run starts (``plan.json``: every step with its
kind, folder, inputs, stage and the resources it holds), each finished step's
``manifest.json``, the working folders of steps still running, the clean and selecting steps'
samples of rejected pairs and, through each step kind's
:meth:`mtcore.contracts.step.Step.curves`, the training curves a step has logged so far.
Sections: the stage table (with each stage's change and, where the evaluate steps kept their
hypotheses, the paired bootstrap p-value against the stage above it), training curves, the
data funnel, rejected samples, the plan graph and the step table (status, cache state,
seconds, resources held, output size).

What each section shows is plain data (:mod:`mtcore.report.page_data`, the charts' geometry in
:mod:`mtcore.report.page_charts`); Jinja2 templates (``templates/``, package data) draw it with
autoescaping on, so no text from the workdir (rejected pairs are corpus text) reaches the page
unescaped."""

from __future__ import annotations

import fcntl
import functools
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from mtcore.contracts.errors import MtcoreError
from mtcore.exec.files import replace_file
from mtcore.recipe.paths import finished_dir, work_dir
from mtcore.report import page_data
from mtcore.report.page_charts import (
    PALETTE as PALETTE,
    STATUS_COLOURS as STATUS_COLOURS,
    bar_chart_data,
    line_chart_data,
    plan_graph_data,
)
from mtcore.report.page_data import (
    REJECT_ROWS as REJECT_ROWS,
    PageData as PageData,
    StepView as StepView,
)
from mtcore.run.plan_file import plan_file
from mtcore.system.significance import paired_test

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from mtcore.contracts.registry import Registry
    from mtcore.run.results import RunResult

PAGE_FILE = "report.html"


def page_file(workdir: Path, label: str | None = None) -> Path:
    return workdir / (PAGE_FILE if label is None else f"report.{label}.html")


# --- what the page shows ---------------------------------------------------------------------


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
        final = finished_dir(workdir, entry["dir"])
        work = work_dir(workdir, entry["dir"])
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

SECTIONS = (
    ("stages", "Scores by stage"),
    ("curves", "Training curves"),
    ("funnel", "Data funnel"),
    ("rejects", "Rejected samples"),
    ("graph", "Plan graph"),
    ("steps", "Steps"),
)


@functools.cache
def templates() -> jinja2.Environment:
    """The page's templates, every ``{{ value }}`` escaped (autoescape)."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader(__name__.rpartition(".")[0], "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _macro(template: str, name: str, value: Any) -> str:
    return str(getattr(templates().get_template(template).module, name)(value))


def line_chart(
    series: dict[str, list[tuple[int, float]]], title: str, x_label: str = "update"
) -> str:
    """An SVG line chart, a line per series, with axes, ticks and a legend."""
    chart = line_chart_data(series, title, x_label)
    return "" if chart is None else _macro("charts.html.j2", "line_chart", chart)


def bar_chart(rows: list[tuple[str, float, str]], title: str, unit: str = "") -> str:
    """Horizontal SVG bars: (label, value, link target or "") per row."""
    chart = bar_chart_data(rows, title, unit)
    return "" if chart is None else _macro("charts.html.j2", "bar_chart", chart)


def plan_graph(steps: list[StepView]) -> str:
    """The plan as layers (a step one column right of its deepest input), a box per step
    coloured by status, linked to its row in the step table."""
    return _macro("charts.html.j2", "plan_graph", plan_graph_data(steps))


def _bodies(data: PageData, p_values: dict[tuple[str, str], float] | None) -> dict[str, Any]:
    """Each section's data, by its key in ``SECTIONS`` (the macro of ``sections.html.j2``)."""
    return {
        "stages": page_data.stage_table(data, p_values),
        "curves": page_data.curves(data),
        "funnel": page_data.funnel(data),
        "rejects": page_data.rejects(data),
        "graph": plan_graph_data(data.steps),
        "steps": _steps_body(data),
    }


def _steps_body(data: PageData) -> dict[str, Any]:
    return {"rows": page_data.step_rows(data), "longest": page_data.longest_steps(data)}


def stage_section(data: PageData, p_values: dict[tuple[str, str], float] | None = None) -> str:
    return _macro("sections.html.j2", "stages", page_data.stage_table(data, p_values))


def curves_section(data: PageData) -> str:
    return _macro("sections.html.j2", "curves", page_data.curves(data))


def funnel_section(data: PageData) -> str:
    return _macro("sections.html.j2", "funnel", page_data.funnel(data))


def rejects_section(data: PageData) -> str:
    return _macro("sections.html.j2", "rejects", page_data.rejects(data))


def steps_section(data: PageData) -> str:
    return _macro("sections.html.j2", "steps", _steps_body(data))


def render_page(data: PageData, p_values: dict[tuple[str, str], float] | None = None) -> str:
    return (
        templates()
        .get_template("page.html.j2")
        .render(head=page_data.header(data), sections=SECTIONS, bodies=_bodies(data, p_values))
    )


# --- significance -----------------------------------------------------------------------------

SIGNIFICANCE_CACHE = 2  # the version of .page/significance.json: 2 added the segment means


def _paired_p_values(
    workdir: Path, registry: Registry, before: StepView, view: StepView
) -> dict[str, float]:
    try:
        changes = paired_test(workdir, registry, before.manifest, view.manifest)
    except (MtcoreError, OSError, ValueError, KeyError) as exc:
        log.info("run page: no significance test of %s against %s: %s", view.id, before.id, exc)
        return {}
    return {change.metric: change.p_value for change in changes}


def significance(data: PageData, registry: Registry) -> dict[tuple[str, str], float]:
    """(step, metric) -> p-value of its change from the stage above it in the same direction,
    for finished stage steps (:func:`mtcore.system.significance.paired_test`); cached in
    ``.page/significance.json`` by the two steps' folders."""
    cache_path = data.workdir / ".page" / "significance.json"
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        cache = {}
    tests = cache.get("tests", {}) if cache.get("version") == SIGNIFICANCE_CACHE else {}
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
        if key not in tests:
            tests[key] = _paired_p_values(data.workdir, registry, before, view)
            changed = True
        for metric, p_value in tests[key].items():
            found[(view.id, metric)] = p_value
    if changed:
        cache_path.parent.mkdir(exist_ok=True)
        document = {"version": SIGNIFICANCE_CACHE, "tests": tests}
        cache_path.write_text(json.dumps(document), encoding="utf-8")
    return found


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
