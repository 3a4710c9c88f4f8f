"""Options and loading shared by the ``mtcore`` commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from mtcore.contracts.registry import load_registry
from mtcore.run.cache import LOCK_ENV, lock_path


def recipe_options(f: Any, required: bool = True) -> Any:
    """RECIPE, ``--profile`` and ``--set``."""
    f = click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY.PATH=VALUE",
        help="Override a recipe value (repeatable).",
    )(f)
    f = click.option(
        "--profile", "-p", default=None, help="Profile to apply (default: the recipe's)."
    )(f)
    kind = click.Path(dir_okay=False, path_type=Path)
    return click.argument("recipe", required=required, type=kind)(f)


def optional_recipe_options(f: Any) -> Any:
    """:func:`recipe_options` for a command that can take ``--system DIR`` instead."""
    return recipe_options(f, required=False)


def load(recipe_path: Path, profile: str | None, sets: tuple[str, ...]) -> tuple[Any, Any, Any]:
    from mtcore.recipe.load import load_recipe
    from mtcore.report.hooks import make_plugin_manager

    registry = load_registry()
    recipe = load_recipe(recipe_path, registry, profile, list(sets))
    hooks = make_plugin_manager()
    hooks.hook.mtcore_recipe_loaded(recipe=recipe)
    return registry, recipe, hooks


def default_workdir(recipe: Any, workdir: Path | None) -> Path:
    return workdir if workdir is not None else Path("work") / recipe.name


def name_lock_file(recipe: Path) -> Path:
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
