"""``mtcore plan``, ``report`` and ``plugins``: show what a run would do, what it did, and
what is installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mtcore.cli.common import default_workdir, load, recipe_options
from mtcore.contracts.registry import KINDS, load_registry
from mtcore.run.schedule import GPU_TOKENS_PER_SECOND as GPU_KINDS


@click.command()
@recipe_options
@click.option("--workdir", "-w", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option(
    "--slots",
    default=None,
    metavar="cpu=N,gpu=M",
    help="Simulate the schedule on this many CPU threads and GPUs and print its makespan.",
)
@click.option(
    "--gpu",
    "gpu_kind",
    type=click.Choice(sorted(GPU_KINDS)),
    default="h100",
    show_default=True,
    help="GPU kind whose tokens/s estimate trainings' times (with --slots).",
)
@click.option(
    "--tokens-per-second",
    type=click.FloatRange(min=1),
    default=None,
    help="Target tokens/s of one GPU instead of the --gpu kind's estimate.",
)
@click.option(
    "--scaling",
    default=None,
    metavar="node=E,cluster=E,shards=E,gpus_per_node=N",
    help="Data-parallel efficiency per doubling of a training's GPUs within a node and across "
    "nodes, of a sharded step's (a translation's) GPUs, and GPUs a node (with --slots; default "
    "node=0.97,cluster=0.95,shards=1,gpus_per_node=8).",
)
def plan(
    recipe: Path,
    profile: str | None,
    sets: tuple[str, ...],
    workdir: Path | None,
    slots: str | None,
    gpu_kind: str,
    tokens_per_second: float | None,
    scaling: str | None,
) -> None:
    """Show the steps in order, their dependencies and whether their output is cached; with
    --slots, the schedule's makespan from per-step cost estimates, trainings given a GPU range
    at the widths the planner chooses."""
    from mtcore.run.runner import Runner

    registry, loaded, _ = load(recipe, profile, sets)
    runner = Runner(loaded, registry, default_workdir(loaded, workdir))
    rows = runner.status()
    if slots is not None:
        from mtcore.run.plan_cost import print_schedule

        tps = tokens_per_second or GPU_KINDS[gpu_kind]
        from mtcore.run.scaling import Scaling

        model = Scaling.parse(scaling) if scaling else Scaling()
        print_schedule(runner, rows, slots, tps, f"{tokens_per_second or gpu_kind}", model)
        return
    width = max((len(p.id) for p, _ in rows), default=0)
    kind_width = max((len(p.spec.kind) for p, _ in rows), default=0)
    for planned, cached in rows:
        deps = ", ".join(planned.deps) or "-"
        status = "cached" if cached else "to run"
        click.echo(
            f"{status:7} {planned.id:<{width}}  {planned.spec.kind:<{kind_width}}  "
            f"{planned.hash}  <- {deps}"
        )


@click.command()
@click.argument("workdir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option(
    "--label", default=None, metavar="NAME", help="A variant's page (mtcore compare, --ablate)."
)
@click.option("--open", "open_page", is_flag=True, help="Open the page in a web browser.")
def report(workdir: Path, label: str | None, open_page: bool) -> None:
    """Rebuild WORKDIR's run page (report.html) from what is on disk: at any time, also while
    a run is going on (steps running show their curves so far)."""
    from mtcore.report.page import write_page

    path = write_page(workdir, load_registry(), label)
    click.echo(f"page: {path}")
    if open_page:
        import webbrowser

        if not webbrowser.open(path.resolve().as_uri()):
            click.echo("no web browser found: open the file above yourself", err=True)


@click.command()
@click.argument("kind", required=False)
@click.option("--show", "show", default=None, metavar="NAME", help="Print one plugin's settings.")
def plugins(kind: str | None, show: str | None) -> None:
    """List installed plugins by kind (without importing them)."""
    from mtcore.contracts.registry import group

    registry = load_registry()
    kinds = [kind] if kind else list(KINDS)
    for k in kinds:
        group(k)
    if show is not None:
        if kind is None:
            raise click.UsageError("--show needs a KIND, e.g. mtcore plugins filters --show length")
        _show(registry, kind, show)
        return
    for k in kinds:
        names = registry.names(k)
        click.echo(f"{k}:" + ("" if names else " (none)"))
        for name in names:
            info = registry.info(k, name)
            click.echo(f"  {name:<22} {info.dist} {info.version}  ({info.target})")


def _show(registry: Any, kind: str, name: str) -> None:
    cls = registry.load(kind, name)
    info = registry.info(kind, name)
    click.echo(f"{kind} {name}  ({info.dist} {info.version}, {info.target})")
    doc = (cls.__doc__ or "").strip()
    if doc:
        click.echo(f"  {doc.splitlines()[0]}")
    if cls.licences:
        click.echo("  licences of the models it runs:")
        for what, licence in cls.licences.items():
            click.echo(f"    {what}: {licence}")
    for field_name, field in cls.Config.model_fields.items():
        default = (
            "required"
            if field.is_required()
            else f"default {field.get_default(call_default_factory=True)!r}"
        )
        click.echo(f"  {field_name}: {field.annotation!s} ({default})")
        if field.description:
            click.echo(f"      {field.description}")
