"""Every shipped recipe validates at every profile, without network or ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtcore.recipe import build_recipe, read_yaml

RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))
CASES = [
    (path, profile)
    for path in RECIPES
    for profile in [None, *(read_yaml(path).get("profiles") or {})]
]


@pytest.mark.parametrize(("path", "profile"), CASES, ids=[f"{p.stem}-{prof}" for p, prof in CASES])
def test_recipe_validates(registry, path, profile):
    recipe = build_recipe(read_yaml(path), registry, profile=profile, source=str(path))
    assert recipe.steps
    for spec in recipe.steps.values():  # recipes are data: they never point into ../shared
        assert "shared/data" not in str(spec.plugin.config)


def test_nt5_default_profile_is_offline(registry):
    recipe = build_recipe(read_yaml(RECIPES[0].parent / "nt5.yaml"), registry)
    sources = {spec.plugin.config.source for spec in recipe.steps.values() if spec.kind == "fetch"}
    assert sources == {"gettext"}
