"""Is each stage's change significant? sacrebleu's paired bootstrap resampling (Koehn 2004)
between consecutive stages of a finished run: every ``eval_<stage>_<direction>`` step of the
recipe, in recipe order, compared with the stage above it on the same test set.

    .venv/bin/python scripts/stage_significance.py recipes/yishu.yaml -p small -w work/yishu-small

With ``--ablate STEP[,STEP...]`` each stage is compared instead with the same stage of that
variant of the recipe (``mtcore run --ablate`` in the same workdir); stages the removal leaves
unchanged (the same step) are left out.

Run from where the recipe was run (local corpus paths are resolved against the current
directory, and they are part of the step hashes). The test is :mod:`mtcore.system.significance`'s,
the run page's too: BLEU and chrF built by the evaluate step's own metric plugins from the step's
config (tokenizer, case, smoothing, chrF orders and beta), COMET and MetricX on the segment
scores the step kept; the rescored systems must match the recorded scores, or the script stops.
"""

from __future__ import annotations

import argparse
from itertools import pairwise
from pathlib import Path
from typing import Any

from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.registry import Registry, load_registry
from mtcore.recipe.ablation import parse_ablations
from mtcore.recipe.load import load_recipe
from mtcore.recipe.plan import make_plan, step_dir
from mtcore.run.runner import is_complete, read_manifest
from mtcore.system.significance import paired_test


def stage_steps(
    recipe: Any, registry: Registry, workdir: Path
) -> dict[str, list[tuple[str, dict]]]:
    """Direction -> [(stage, manifest)] of the recipe's finished steps that score a stage
    (``Step.stage``), in recipe order."""
    by_direction: dict[str, list[tuple[str, dict]]] = {}
    for planned in make_plan(recipe, registry):
        staged = planned.spec.plugin.stage(planned.id)
        path = step_dir(workdir, planned)
        if staged and is_complete(path):
            by_direction.setdefault(staged[1], []).append((staged[0], read_manifest(path)))
    return by_direction


def compare(
    registry: Registry, workdir: Path, old: dict, new: dict, label: str, samples: int
) -> tuple[list[str], list[str]]:
    """The metric names of the paired test of two evaluate steps and the cells (change,
    p-value) of each; stops where the test cannot be made (see ``paired_test``)."""
    try:
        changes = paired_test(workdir, registry, old, new, samples)
    except MtcoreError as exc:
        raise SystemExit(f"{label}: {exc}") from None
    cells = []
    for change in changes:
        cells += [f"{change.delta:+.{change.places}f}", f"{change.p_value:.3f}"]
    return [change.metric for change in changes], cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--profile", "-p", default=None, help="profile (default: the recipe's)")
    parser.add_argument("--workdir", "-w", type=Path, required=True)
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="the overrides the run was made with (repeatable), as for mtcore run",
    )
    parser.add_argument(
        "--ablate",
        metavar="STEP[,STEP...]",
        help="compare each stage with the same stage of this --ablate variant (run before, "
        "with mtcore run --ablate, in the same workdir) instead of with the stage above",
    )
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    args = parser.parse_args()
    registry = load_registry()
    recipe = load_recipe(args.recipe, registry, args.profile, args.sets)
    full = stage_steps(recipe, registry, args.workdir)
    rows: list[tuple[str, str, dict, dict]] = []  # direction, change, old, new
    if args.ablate:
        (removed,) = parse_ablations([args.ablate])
        variant = load_recipe(args.recipe, registry, args.profile, args.sets, removed)
        label = "-" + ",".join(removed)
        ablated = {
            (direction, stage): manifest
            for direction, stages in stage_steps(variant, registry, args.workdir).items()
            for stage, manifest in stages
        }
        for direction, stages in full.items():
            for stage, manifest in stages:
                other = ablated.get((direction, stage))
                if other is None:
                    raise SystemExit(f"eval_{stage}_{direction}: the {label} variant has not run")
                if other["hash"] != manifest["hash"]:  # the same step: nothing to test
                    rows.append((direction, f"{stage}: full -> {label}", manifest, other))
    else:
        for direction, stages in full.items():
            for (before, old), (after, new) in pairwise(stages):
                rows.append((direction, f"{before} -> {after}", old, new))
    header = False
    for direction, change, old, new in rows:
        label = f"{direction} {change}"
        metrics, cells = compare(registry, args.workdir, old, new, label, args.samples)
        if not header:
            print("| direction | change | " + " | ".join(f"{m} | p" for m in metrics) + " |")
            print("|---|---|" + "---:|---:|" * len(metrics))
            header = True
        print(f"| {direction} | {change} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
