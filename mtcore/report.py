"""``report.md`` in the workdir: what ran, what was cached, counts, timings and scores."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtcore.recipe import Recipe
    from mtcore.runner import RunResult


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


def render_report(recipe: Recipe, result: RunResult) -> str:
    lines = [
        f"# {recipe.name}" + (f" — profile `{recipe.profile}`" if recipe.profile else ""),
        "",
    ]
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
    scores = [
        (item.planned.id, name, value)
        for item in result.results
        for name, value in item.manifest.get("metrics", {}).items()
        if isinstance(value, dict) and "signature" in value
    ]
    if scores:
        lines += [
            "",
            "## Scores",
            "",
            "| step | metric | score | signature |",
            "|---|---|---:|---|",
        ]
        for step_id, name, value in scores:
            lines.append(f"| {step_id} | {name} | {value['score']:.2f} | `{value['signature']}` |")
    lines += [
        "",
        f"Step outputs: `steps/<id>-<hash>/` with `manifest.json`. Log: `{result.log_file}`.",
        "",
    ]
    return "\n".join(lines)


def write_report(recipe: Recipe, result: RunResult) -> None:
    (result.workdir / "report.md").write_text(render_report(recipe, result), encoding="utf-8")
