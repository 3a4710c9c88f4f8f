"""The ``mtcore`` command. The one place an error becomes ``Error: ...`` and an exit code."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from mtcore import __version__
from mtcore.cli.common import (
    default_workdir as _workdir,
    load as _load,
    recipe_options as _recipe_options,
)
from mtcore.cli.datasets import datasets
from mtcore.cli.translate import export, translate
from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.registry import KINDS, load_registry
from mtcore.run.cache import LOCK_ENV, lock_path
from mtcore.run.schedule import GPU_TOKENS_PER_SECOND as GPU_KINDS


class ErrorBoundary(click.Group):
    """Turns MtcoreError (and only with --debug, its traceback) into a one-line message."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MtcoreError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=ErrorBoundary)
@click.version_option(__version__, prog_name="mtcore")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Build machine-translation systems from YAML recipes."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    _console_logging(debug)


cli.add_command(translate)
cli.add_command(export)
cli.add_command(datasets)


def _console_logging(debug: bool) -> None:
    """Warnings (everything with --debug) to stderr; the run log in the workdir gets INFO."""
    logger = logging.getLogger("mtcore")
    for handler in list(logger.handlers):
        if getattr(handler, "_mtcore_console", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler()
    handler._mtcore_console = True  # type: ignore[attr-defined]
    handler.setLevel(logging.DEBUG if debug else logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)


@cli.command()
@_recipe_options
def validate(recipe: Path, profile: str | None, sets: tuple[str, ...]) -> None:
    """Check a recipe and every plugin setting in it, without running anything."""
    _, loaded, _ = _load(recipe, profile, sets)
    click.echo(f"{recipe}: valid ({len(loaded.steps)} steps, profile {loaded.profile or '-'})")


def _name_lock_file(recipe: Path) -> Path:
    """``$MTCORE_LOCK_FILE`` names RECIPE's lock file for this command's steps (and its jobs
    elsewhere), and is put back when the command ends."""
    path = lock_path(recipe.absolute())
    old = os.environ.get(LOCK_ENV)
    os.environ[LOCK_ENV] = str(path)

    def restore() -> None:
        if old is None:
            os.environ.pop(LOCK_ENV, None)
        else:
            os.environ[LOCK_ENV] = old

    click.get_current_context().call_on_close(restore)
    return path


@cli.command()
@_recipe_options
def lock(recipe: Path, profile: str | None, sets: tuple[str, ...]) -> None:
    """Download every file the recipe's data entries fetch without a pinned sha256 and record
    its sha256 and size in RECIPE's .lock file (written anew); `mtcore run` then checks those
    files against it."""
    from mtcore.contracts.stats import Stats
    from mtcore.recipe.plan import make_plan

    registry, loaded, _ = _load(recipe, profile, sets)
    path = _name_lock_file(recipe)
    path.unlink(missing_ok=True)
    entries = 0
    for planned in make_plan(loaded, registry):
        if getattr(planned.spec.plugin, "fetches_model", False):  # a models entry
            entries += bool(planned.spec.plugin.relock(Stats(), planned.id))  # type: ignore[attr-defined]
            continue
        if not getattr(planned.spec.plugin, "fetches", False):
            continue
        fetch: Any = planned.spec.plugin.config  # a data entry: its source and settings
        source = registry.load("sources", fetch.source).from_dict(fetch.config)
        relock = getattr(source, "relock", None)
        if relock is not None:
            relock(Stats())
            entries += 1
    files = len(json.loads(path.read_text(encoding="utf-8"))["files"]) if path.is_file() else 0
    click.echo(f"{path}: {files} unpinned files of {entries} data and models entries recorded")


@cli.command()
@_recipe_options
@click.option("--workdir", "-w", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--full", is_flag=True, help="Read every output file again and compare its sha256.")
def verify(
    recipe: Path, profile: str | None, sets: tuple[str, ...], workdir: Path | None, full: bool
) -> None:
    """Check the complete steps' outputs against their manifests: files missing, resized, or
    with a new mtime and other content (--full: every file's sha256), and files or links the
    manifest does not list. A damaged step is moved to steps/.quarantine/ (kept for a look),
    so the next `mtcore run` runs it again; exit status 1 when one is found."""
    from mtcore.recipe.plan import make_plan, step_dir
    from mtcore.run.cache import damage, is_complete, quarantine, unlisted

    registry, loaded, _ = _load(recipe, profile, sets)
    where = _workdir(loaded, workdir)
    checked, damaged = 0, 0
    for planned in make_plan(loaded, registry):
        final = step_dir(where, planned)
        if not is_complete(final):
            continue
        checked += 1
        reason = damage(final, full=full)
        extra = unlisted(final)
        if reason is None and extra:
            shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
            reason = f"{final} holds what its manifest does not list: {shown}"
        if reason is not None:
            damaged += 1
            moved = quarantine(where, final)
            click.echo(f"damaged {planned.id}: {reason}; moved to {moved} (the next run runs "
                       "it again)")  # fmt: skip
    click.echo(f"{checked} complete steps checked ({'sha256' if full else 'size, mtime'}): "
               f"{damaged} damaged")  # fmt: skip
    if damaged:
        sys.exit(1)


@cli.command()
@_recipe_options
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
    metavar="node=E,cluster=E,gpus_per_node=N",
    help="Data-parallel efficiency per doubling of a training's GPUs within a node and across "
    "nodes, and GPUs a node (with --slots; default node=0.97,cluster=0.95,gpus_per_node=8).",
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

    registry, loaded, _ = _load(recipe, profile, sets)
    runner = Runner(loaded, registry, _workdir(loaded, workdir))
    rows = runner.status()
    if slots is not None:
        from mtcore.run.plan_cost import print_schedule

        tps = tokens_per_second or GPU_KINDS[gpu_kind]
        from mtcore.run.schedule import Scaling

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


@cli.command()
@_recipe_options
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
    help="TensorBoard event files from every training (fairseq's own logging), a folder per "
    "step in DIR (default: WORKDIR/tensorboard).",
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
    registry, loaded, hooks = _load(recipe, profile, sets)
    _name_lock_file(recipe)
    target = _workdir(loaded, workdir)
    if track is not None:
        from mtcore.report.tracking import TRACKER, MlflowTracker

        hooks.register(MlflowTracker(track or None, experiment, registry=registry), name=TRACKER)
    elif experiment is not None:
        raise click.UsageError("--experiment names an MLflow experiment: add --track")
    if tensorboard is not None:
        import importlib.util

        if importlib.util.find_spec("tensorboard") is None:
            raise click.UsageError("--tensorboard needs TensorBoard: pip install tensorboard")
        folder = Path(tensorboard) if tensorboard else target / "tensorboard"
        os.environ["MTCORE_TENSORBOARD"] = str(folder.resolve())  # the trainings read it
    if ablations:
        if until is not None:
            raise click.UsageError("--ablate runs whole recipes; leave out --until")
        _ablate(recipe, profile, sets, registry, loaded, hooks, target, ablations, quiet)
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


@cli.command()
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


@cli.command()
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


@cli.command()
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


_PLUGIN_COMMANDS: list[bool] = []


def with_plugin_commands() -> click.Group:
    """The command group with the commands that installed packages add through the
    ``mtcore_add_commands`` hook (the shipped plugins add ``evaluate``), added once."""
    if not _PLUGIN_COMMANDS:
        from mtcore.report.hooks import make_plugin_manager

        make_plugin_manager().hook.mtcore_add_commands(cli=cli)
        _PLUGIN_COMMANDS.append(True)
    return cli


def main() -> None:
    from mtcore.exec.process import safe_children, safe_torch_loads, thread_defaults

    thread_defaults()  # both before any worker process starts
    safe_torch_loads()
    safe_children()

    with_plugin_commands()(obj={})
