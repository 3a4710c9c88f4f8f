"""Every step's folder name (``<id>-<hash>``) of the four recipes, every profile, one line each:
``recipe profile folder``. Two commits plan alike when their outputs are equal
(``diff <(python scripts/plan_hashes.py) before.txt``); Yishu's CCMT files are given as empty
files of a fixed folder, since its profiles read them by path."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import load_recipe
from mtcore.recipe.plan import make_plan

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ("nt5", "yishu", "xiaomi", "hwtsc")


def main() -> None:
    registry = load_registry()
    ccmt = Path("/tmp/mtcore-plan-hashes-ccmt")
    ccmt.mkdir(exist_ok=True)
    for lang in ("en", "zh"):
        (ccmt / f"ccmt.{lang}").touch()
    for name in RECIPES:
        path = ROOT / "recipes" / f"{name}.yaml"
        profiles = yaml.safe_load(path.read_text(encoding="utf-8")).get("profiles", {})
        sets = [f"vars.ccmt_dir={ccmt}"] if name == "yishu" else []
        for profile in profiles:
            recipe = load_recipe(path, registry, profile, sets)
            for planned in make_plan(recipe, registry):
                sys.stdout.write(f"{name} {profile} {planned.dirname}\n")


if __name__ == "__main__":
    main()
