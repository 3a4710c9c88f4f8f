"""``mtcore run`` (with ``--ablate``) and ``mtcore compare``: run recipes."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from mtcore.cli.common import default_workdir, load, name_lock_file, recipe_options
from mtcore.contracts.registry import load_registry


@click.command()
@recipe_options
@click.option(
    "--workdir",
    "-w",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where step outputs live (default: work/<recipe name>).",
)
@click.option(
    "--until", default=None, metavar="STEP", help="Stop after this step (and what it needs)."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
@click.option(
    "--scheduler",
    default=None,
    metavar="NAME",
    help="Where steps run: local (default), ray, slurm (replaces the recipe's scheduler:).",
)
@click.option(
    "--slots",
    default=None,
    metavar="cpu=N,gpu=M,steps=K",
    help="Cap what running steps hold at once (cpu=1: one CPU; steps=1: one step at a time, "
    "with every CPU).",
)
@click.option(
    "--keep-going", is_flag=True, help="After a failure, run every step that does not need it."
)
@click.option(
    "--ablate",
    "ablations",
    multiple=True,
    metavar="STEP[,STEP...]",
    help="Also run the recipe without these steps (repeatable: one variant each) and write "
    "ablation.md with each variant's score differences.",
)
@click.option(
    "--track",
    default=None,
    is_flag=False,
    flag_value="",
    metavar="[URI]",
    help="Log the run to MLflow: to URI (http://host:5000, sqlite:///file.db), else to "
    "MLFLOW_TRACKING_URI, else to WORKDIR/mlflow.db. A resumed run continues its runs.",
)
@click.option(
    "--experiment", default=None, metavar="NAME", help="MLflow experiment (default: the recipe)."
)
@click.option(
    "--tensorboard",
    default=None,
    is_flag=False,
    flag_value="",
    metavar="[DIR]",
    help="TensorBoard event files of every training, a folder per step in DIR (default: "
    "WORKDIR/tensorboard): fairseq's own while it trains, written from its log at the end for "
    "one found in the cache.",
)
def run(
    recipe: Path,
    profile: str | None,
    sets: tuple[str, ...],
    workdir: Path | None,
    until: str | None,
    quiet: bool,
    scheduler: str | None,
    slots: str | None,
    keep_going: bool,
    ablations: tuple[str, ...],
    track: str | None,
    experiment: str | None,
    tensorboard: str | None,
) -> None:
    """Run a recipe: ready steps run side by side where their resources allow; completed
    steps are reused, a killed run resumes."""
    from mtcore.contracts.resources import parse_slots
    from mtcore.report.display import Display
    from mtcore.run.runner import Runner

    caps = parse_slots(slots) if slots else None
    if scheduler is not None:  # as --set scheduler.name=...: its settings are checked against it
        sets = (*sets, f"scheduler.name={scheduler}")
    registry, loaded, hooks = load(recipe, profile, sets)
    name_lock_file(recipe)
    target = default_workdir(loaded, workdir)
    said = _trackers(hooks, registry, target, track, experiment, tensorboard)
    if ablations:
        if until is not None:
            raise click.UsageError("--ablate runs whole recipes; leave out --until")
        _ablate(recipe, profile, sets, registry, loaded, hooks, target, ablations, quiet)
        _say(said)
        return
    runner = Runner(
        loaded,
        registry,
        target,
        hooks,
        show_progress=not quiet and sys.stderr.isatty(),
        slots=caps,
        keep_going=keep_going,
        display=None if quiet else Display,
    )
    with interruptible() as stopped:
        try:
            result = runner.run(until)
        except KeyboardInterrupt:
            # a second copy of the signal must not cut the message short
            numbers = (signal.SIGINT, signal.SIGTERM)
            previous = {number: signal.signal(number, signal.SIG_IGN) for number in numbers}
            try:
                during = f" during step {runner.current}" if runner.current else ""
                click.echo(
                    f"mtcore: stopped by {stopped[0]}{during}. Finished steps are kept and "
                    f"{target} resumes where it stopped: run the same `mtcore run` command again.",
                    err=True,
                )
            finally:
                for number, handler in previous.items():
                    signal.signal(number, handler)
            sys.exit(143 if stopped[0] == "SIGTERM" else 130)
    for item in result.results:
        click.echo(f"{item.status:7} {item.planned.id} ({item.manifest.get('seconds', 0):.1f}s)")
        for name, value in item.manifest.get("metrics", {}).items():
            if isinstance(value, dict) and "signature" in value:
                click.echo(f"        {name} = {value['score']:.2f}  {value['signature']}")
    click.echo(f"report: {target / 'report.md'}")
    click.echo(f"page: {target / 'report.html'}")
    _say(said)


def _say(trackers: list[Any]) -> None:
    for tracker in trackers:
        for line in tracker.summary():
            click.echo(line)


def _trackers(
    hooks: Any,
    registry: Any,
    target: Path,
    track: str | None,
    experiment: str | None,
    tensorboard: str | None,
) -> list[Any]:
    """Registers the trackers asked for on the run's hooks; they say what they did at its end
    (``summary()``)."""
    trackers: list[Any] = []
    if track is not None:
        from mtcore.report.tracking import TRACKER, MlflowTracker

        trackers.append(MlflowTracker(track or None, experiment, registry=registry))
        hooks.register(trackers[-1], name=TRACKER)
    elif experiment is not None:
        raise click.UsageError("--experiment names an MLflow experiment: add --track")
    if tensorboard is not None:
        import importlib.util

        from mtcore.report.tensorboard import BOARD, ENV, TensorboardWriter

        if importlib.util.find_spec("tensorboard") is None:
            raise click.UsageError("--tensorboard needs TensorBoard: pip install tensorboard")
        folder = (Path(tensorboard) if tensorboard else target / "tensorboard").resolve()
        os.environ[ENV] = str(folder)  # the trainings read it
        trackers.append(TensorboardWriter(folder, registry))
        hooks.register(trackers[-1], name=BOARD)
    return trackers


@contextmanager
def interruptible() -> Iterator[list[str]]:
    """SIGTERM stops a run as Ctrl-C does (a KeyboardInterrupt where the run is); yields the
    name of the signal that stopped it."""
    stopped = ["Ctrl-C (SIGINT)"]

    def on_term(signum: int, frame: Any) -> None:
        stopped[0] = "SIGTERM"
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGTERM, previous)


def _ablate(
    path: Path,
    profile: str | None,
    sets: tuple[str, ...],
    registry: Any,
    full: Any,
    hooks: Any,
    workdir: Path,
    ablations: tuple[str, ...],
    quiet: bool,
) -> None:
    from mtcore.recipe.ablation import parse_ablations
    from mtcore.recipe.load import load_recipe
    from mtcore.report.compare import Variant, run_variants, write_comparison

    variants = [Variant("full", full)]
    for removed in parse_ablations(ablations):
        ablated = load_recipe(path, registry, profile, list(sets), removed)
        variants.append(Variant("-" + ",".join(removed), ablated))
    run_variants(variants, registry, workdir, hooks, not quiet and sys.stderr.isatty())
    title = f"{full.name}: ablation" + (f" (profile {full.profile})" if full.profile else "")
    out = write_comparison(workdir, "ablation", title, variants, baseline=True)
    click.echo(out.read_text(encoding="utf-8"))
    click.echo(f"ablation: {out}")


@click.command()
@click.argument("recipes", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--profile", "-p", default=None, help="Profile for every recipe (default: each one's)."
)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY.PATH=VALUE", help="Override in every recipe."
)
@click.option(
    "--workdir",
    "-w",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("work/compare"),
    show_default=True,
    help="One workdir for all: identical steps run once.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def compare(
    recipes: tuple[Path, ...],
    profile: str | None,
    sets: tuple[str, ...],
    workdir: Path,
    quiet: bool,
) -> None:
    """Run several recipes in one workdir and write compare.md (and compare.png) side by
    side: pairs kept after each data step, training time, scores per direction."""
    from mtcore.recipe.load import load_recipe
    from mtcore.report.compare import Variant, run_variants, unique_labels, write_comparison
    from mtcore.report.hooks import make_plugin_manager

    registry = load_registry()
    hooks = make_plugin_manager()
    loaded = [load_recipe(path, registry, profile, list(sets)) for path in recipes]
    for recipe in loaded:
        hooks.hook.mtcore_recipe_loaded(recipe=recipe)
    labels = unique_labels([recipe.name for recipe in loaded])
    variants = [Variant(label, recipe) for label, recipe in zip(labels, loaded, strict=True)]
    run_variants(variants, registry, workdir, hooks, not quiet and sys.stderr.isatty())
    title = "compare: " + ", ".join(labels) + (f" (profile {profile})" if profile else "")
    out = write_comparison(workdir, "compare", title, variants)
    click.echo(out.read_text(encoding="utf-8"))
    click.echo(f"comparison: {out}")
