"""Training cost of recipes at a profile: trainings, updates and tokens (max_tokens x
update_freq x max_update) of every ``train`` and ``train_lm`` step, to size a profile before
running it.

    .venv/bin/python scripts/recipe_cost.py --profile small recipes/*.yaml
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import build_recipe, read_yaml

TRAINING = ("train", "train_lm")


def cost(path: Path, profile: str | None) -> tuple[int, int, int]:
    recipe = build_recipe(read_yaml(path), load_registry(), profile=profile, source=str(path))
    trainings = updates = tokens = 0
    for spec in recipe.steps.values():
        if spec.kind in TRAINING:
            config = spec.plugin.config
            steps = int(config.max_update)
            trainings += 1
            updates += steps
            tokens += steps * int(config.max_tokens) * int(getattr(config, "update_freq", 1) or 1)
    return trainings, updates, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="+", type=Path)
    parser.add_argument("--profile", "-p", default=None, help="profile (default: the recipe's)")
    args = parser.parse_args()
    print("| recipe | trainings | updates in all | tokens in all (max_tokens x updates) |")
    print("|---|---:|---:|---:|")
    for path in args.recipes:
        trainings, updates, tokens = cost(path, args.profile)
        print(f"| {path.stem} | {trainings} | {updates:,} | {tokens / 1e6:,.0f} M |")


if __name__ == "__main__":
    main()
