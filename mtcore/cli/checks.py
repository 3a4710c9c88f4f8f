"""``mtcore validate``, ``lock`` and ``verify``: check a recipe, record its downloads' sha256,
check a workdir's outputs against their manifests."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from mtcore.cli.common import default_workdir, load, name_lock_file, recipe_options


@click.command()
@recipe_options
def validate(recipe: Path, profile: str | None, sets: tuple[str, ...]) -> None:
    """Check a recipe and every plugin setting in it, without running anything."""
    _, loaded, _ = load(recipe, profile, sets)
    click.echo(f"{recipe}: valid ({len(loaded.steps)} steps, profile {loaded.profile or '-'})")


@click.command()
@recipe_options
def lock(recipe: Path, profile: str | None, sets: tuple[str, ...]) -> None:
    """Download every file the recipe's data entries fetch without a pinned sha256 and record
    its sha256 and size in RECIPE's .lock file (written anew); `mtcore run` then checks those
    files against it."""
    from mtcore.contracts.stats import Stats
    from mtcore.recipe.plan import make_plan

    registry, loaded, _ = load(recipe, profile, sets)
    path = name_lock_file(recipe)
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


@click.command()
@recipe_options
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

    registry, loaded, _ = load(recipe, profile, sets)
    where = default_workdir(loaded, workdir)
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
