"""The run page's charts as plain data: the geometry of each SVG chart (coordinates, ticks,
labels) worked out here, drawn by the macros of ``templates/charts.html.j2``, which escape
every text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

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


class Node(Protocol):
    """What the plan graph draws of a step (the page's ``StepView`` is one)."""

    id: str
    kind: str
    status: str
    inputs: dict[str, str]
    manifest: dict[str, Any]


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def anchor(step_id: str, section: str = "step") -> str:
    """The id of a step's row (``step-<id>``) or of its block in another section."""
    return f"{section}-{slug(step_id)}"


def nice(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 1:
        return f"{value:.3g}"
    return f"{value:.2e}" if magnitude < 0.01 else f"{value:.3f}"


def ticks(low: float, high: float, count: int = 4, whole: bool = False) -> list[float]:
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


def tick_labels(values: Sequence[float]) -> list[str]:
    """Labels of evenly spaced ticks, each with the decimals their spacing needs, so that no
    two ticks read the same (9.645 and 9.65, not 9.65 twice)."""
    if len(values) < 2:
        return [nice(v) for v in values]
    step = abs(values[1] - values[0])
    places = -math.floor(math.log10(step) + 1e-9)
    largest = max(abs(v) for v in values)
    if largest < 1e-3 or largest >= 1e6:  # scientific, with the digits the step needs
        digits = max(0, math.floor(math.log10(largest)) + places)
        return ["0" if abs(v) < step / 2 else f"{v:.{digits}e}" for v in values]
    return [f"{0.0 if abs(v) < step / 2 else v:,.{max(0, places)}f}" for v in values]


def series_colours(names: Sequence[str]) -> dict[str, str]:
    """A colour per series name, the same in every chart that draws it."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(dict.fromkeys(names))}


def _bounds(points: Sequence[tuple[int, float]]) -> tuple[float, float, float, float]:
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - abs(y0) * 0.1 - 1e-9, y1 + abs(y1) * 0.1 + 1e-9
    return x0, x1, y0, y1


def line_chart_data(
    series: dict[str, list[tuple[int, float]]],
    title: str,
    x_label: str = "update",
    colours: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """A line chart, a line per series, with axes, ticks and a legend; None without points.
    ``colours``: each series' colour (:func:`series_colours`), by default in turn."""
    width, height, left, right, top, bottom = 460, 230, 62, 12, 26, 40
    points = [p for line in series.values() for p in line]
    if not points:
        return None
    x0, x1, y0, y1 = _bounds(points)
    plot_w, plot_h = width - left - right, height - top - bottom
    y_ticks, x_ticks = ticks(y0, y1), ticks(x0, x1, whole=True)

    def sx(x: float) -> str:
        return f"{left + (x - x0) / (x1 - x0) * plot_w:.1f}"

    def sy(y: float, shift: float = 0) -> str:
        return f"{top + (1 - (y - y0) / (y1 - y0)) * plot_h + shift:.1f}"

    lines = []
    colour = colours or series_colours(list(series))
    for i, (name, line) in enumerate(series.items()):
        lines.append(
            {
                "name": name,
                "colour": colour.get(name, PALETTE[i % len(PALETTE)]),
                "points": " ".join(f"{sx(x)},{sy(y)}" for x, y in line) if len(line) > 1 else "",
                "dots": [
                    {"cx": sx(x), "cy": sy(y), "tip": f"{name} @ {x}: {nice(y)}"}
                    for x, y in (line if len(line) <= 40 else line[-1:])
                ],
                "legend_x": left + plot_w - 4,
                "legend_y": top + 14 + 13 * i,
            }
        )
    return {
        "width": width,
        "height": height,
        "title": title,
        "left": left,
        "tick_x": left - 4,
        "frame": {"x": left, "y": top, "width": plot_w, "height": plot_h},
        "grid": [
            {"x2": left + plot_w, "y": sy(y), "label_y": sy(y, 4), "label": label}
            for y, label in zip(y_ticks, tick_labels(y_ticks), strict=True)
        ],
        "x_ticks": [
            {"x": sx(x), "label": label}
            for x, label in zip(x_ticks, tick_labels(x_ticks), strict=True)
        ],
        "x_tick_y": top + plot_h + 14,
        "x_label": {"x": f"{left + plot_w / 2:.0f}", "y": height - 6, "text": x_label},
        "lines": lines,
    }


def bar_chart_data(
    rows: list[tuple[str, float, str]], title: str, unit: str = ""
) -> dict[str, Any] | None:
    """Horizontal bars: (label, value, link target or "") per row; None without rows."""
    if not rows:
        return None
    longest = max(len(label) for label, _, _ in rows)
    left = min(max(190, 6 * longest + 12), 400)  # room for the labels (10 px text)
    width, bar = left + 370, 18
    most = max(value for _, value, _ in rows) or 1.0
    bars = []
    for i, (label, value, target) in enumerate(rows):
        y = 26 + i * bar
        length = (width - left - 90) * value / most
        bars.append(
            {
                "label": label,
                "target": target,
                "text_y": y + 13,
                "y": y + 3,
                "length": f"{max(length, 1):.1f}",
                "tip": f"{label}: {nice(value)}{unit}",
                "value_x": f"{left + length + 4:.1f}",
                "value": f"{nice(value)}{unit}",
            }
        )
    return {
        "width": width,
        "height": 28 + bar * len(rows) + 6,
        "title": title,
        "left": left,
        "label_x": left - 6,
        "bar_height": bar - 6,
        "colour": PALETTE[0],
        "bars": bars,
    }


def _layers(steps: Sequence[Node]) -> dict[int, list[str]]:
    """Step ids by column: a step one column right of its deepest input."""
    by_id = {s.id: s for s in steps}
    depth: dict[str, int] = {}
    for view in steps:  # plan order: inputs first
        parents = [p for p in view.inputs.values() if p in by_id]
        depth[view.id] = 1 + max((depth.get(p, 0) for p in parents), default=-1)
    columns: dict[int, list[str]] = {}
    for view in steps:
        columns.setdefault(depth[view.id], []).append(view.id)
    return columns


def plan_graph_data(steps: Sequence[Node]) -> dict[str, Any]:
    """The plan as layers, a box per step coloured by status, linked to its row in the step
    table, a line from each input's box."""
    columns = _layers(steps)
    box_w, box_h, gap_x, gap_y = 150, 22, 40, 8
    where = {}
    for column, ids in columns.items():
        for row, step_id in enumerate(ids):
            where[step_id] = (8 + column * (box_w + gap_x), 8 + row * (box_h + gap_y))
    edges = []
    nodes = []
    for view in steps:
        x, y = where[view.id]
        for parent in dict.fromkeys(view.inputs.values()):
            if parent in where:
                px, py = where[parent]
                edges.append({"x1": px + box_w, "y1": py + box_h / 2, "x2": x, "y2": y + box_h / 2})
        seconds = view.manifest.get("seconds")
        tip = f"{view.id} ({view.kind}): {view.status}"
        if isinstance(seconds, int | float):
            tip += f", {seconds:.1f} s"
        nodes.append(
            {
                "href": anchor(view.id),
                "x": x,
                "y": y,
                "text_x": x + 6,
                "text_y": y + 15,
                "colour": STATUS_COLOURS.get(view.status, "#d9d9d9"),
                "tip": tip,
                "label": view.id if len(view.id) <= 21 else view.id[:20] + "…",
            }
        )
    return {
        "width": 16 + len(columns) * (box_w + gap_x),
        "height": 16 + max((len(ids) for ids in columns.values()), default=0) * (box_h + gap_y),
        "box_w": box_w,
        "box_h": box_h,
        "edges": edges,
        "nodes": nodes,
    }
