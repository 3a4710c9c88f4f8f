"""Is each stage's change significant? sacrebleu's paired bootstrap resampling (Koehn 2004)
between consecutive stages of a finished run: every ``eval_<stage>_<direction>`` step of the
recipe, in recipe order, compared with the stage above it on the same test set.

    .venv/bin/python scripts/stage_significance.py recipes/yishu.yaml -p small -w work/yishu-small

With ``--ablate STEP[,STEP...]`` each stage is compared instead with the same stage of that
variant of the recipe (``mtcore run --ablate`` in the same workdir); stages the removal leaves
unchanged (the same step) are left out.

Run from where the recipe was run (local corpus paths are resolved against the current
directory, and they are part of the step hashes). Each metric is built by the evaluate step's
own metric plugin from the step's config (tokenizer, case, smoothing, chrF orders and beta), and
the rescored systems must match the recorded scores, or the script stops.
"""

from __future__ import annotations

import argparse
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from sacrebleu.significance import PairedTest

from mtcore.contracts.registry import Registry, load_registry
from mtcore.data.corpus import Corpus
from mtcore.recipe.ablation import parse_ablations
from mtcore.recipe.load import load_recipe
from mtcore.recipe.plan import make_plan, step_dir
from mtcore.run.runner import is_complete, read_manifest
from mtcore.system.metrics import build_metrics
from mtcore_plugins.steps.evaluate import SEGMENT_SCORES


def texts(workdir: Path, reference: dict[str, str], lang: str | None = None) -> list[str]:
    corpus = Corpus.open(
        workdir / "steps" / f"{reference['step']}-{reference['hash']}" / reference["output"]
    )
    column = corpus.langs.index(lang) if lang else 0
    return [pair[column] for pair in corpus]


def paired_metrics(registry: Registry, step: Any, lang: str) -> dict[str, Any]:
    """Score name -> the sacrebleu metric an evaluate step scores ``lang`` with, built by the
    step's own metric plugins from its config (those with a ``sacrebleu`` method: BLEU, chrF)."""
    return {
        metric.score_name: metric.sacrebleu(lang)
        for metric in build_metrics(registry, step.plugin.config.metrics)
        if hasattr(metric, "sacrebleu")
    }


def stage_steps(
    recipe: Any, registry: Registry, workdir: Path
) -> dict[str, list[tuple[str, dict, Any]]]:
    """Direction -> [(stage, manifest, step spec)] of the recipe's finished steps that score a stage
    (``Step.stage``), in recipe order."""
    by_direction: dict[str, list[tuple[str, dict, Any]]] = {}
    for planned in make_plan(recipe, registry):
        staged = planned.spec.plugin.stage(planned.id)
        path = step_dir(workdir, planned)
        if staged and is_complete(path):
            by_direction.setdefault(staged[1], []).append(
                (staged[0], read_manifest(path), planned.spec)
            )
    return by_direction


def segment_scores(workdir: Path, manifest: dict) -> dict[str, list[float]]:
    """Metric -> its segment scores, as the evaluate step kept them (``segments.jsonl``: the
    metrics whose corpus score is a mean of segment scores, COMET, MetricX)."""
    path = workdir / "steps" / f"{manifest['id']}-{manifest['hash']}" / "scores" / SEGMENT_SCORES
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {row["metric"]: [float(x) for x in row["scores"]] for row in rows}


def paired_mean_bootstrap(
    first: list[float], second: list[float], samples: int, seed: int = 12345
) -> tuple[float, float, float]:
    """(mean of first, mean of second, p-value) of sacrebleu's paired bootstrap resampling,
    for a metric whose corpus score is the mean of its segment scores: the same resampled
    segments for both systems, the deltas centred on their mean (the null hypothesis), and the
    share of them at least as far from zero as the observed delta (Koehn 2004)."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(a), size=(samples, len(a)))
    deltas = b[index].mean(axis=1) - a[index].mean(axis=1)
    observed = float(b.mean() - a.mean())
    extreme = np.abs(deltas - deltas.mean()) >= abs(observed)
    return float(a.mean()), float(b.mean()), float((extreme.sum() + 1) / (samples + 1))


def compare(
    registry: Registry, workdir: Path, spec: Any, old: dict, new: dict, label: str, samples: int
) -> tuple[list[str], list[str]]:
    """The paired bootstrap test of two evaluate steps' systems (same references, same metrics):
    the metric names and the cells (change, p-value) of each. Stops when a rescored system does
    not match its recorded score."""
    lang = next(iter(new["metrics"].values()))["direction"].split("-")[-1]
    refs = texts(workdir, new["inputs"]["ref"], lang)
    metrics = paired_metrics(registry, spec, lang)
    old_segments, new_segments = segment_scores(workdir, old), segment_scores(workdir, new)
    means = [m for m in new_segments if m in old_segments and m in new["metrics"]]
    if not metrics and not means:
        raise SystemExit(
            f"{spec.id}: no metric with a paired test (BLEU, chrF, and those with segment "
            "scores: COMET, MetricX)"
        )
    cells = []
    for metric in means:
        for manifest, kept in ((old, old_segments), (new, new_segments)):
            mean = sum(kept[metric]) / max(1, len(kept[metric]))
            if abs(mean - manifest["metrics"][metric]["score"]) > 1e-3:
                raise SystemExit(f"{label}: {metric}'s segment scores do not average to its score")
        first, second, p_value = paired_mean_bootstrap(
            old_segments[metric], new_segments[metric], samples
        )
        cells += [f"{second - first:+.4f}", f"{p_value:.3f}"]
    if not metrics:
        return means, cells
    systems = [
        ("a", texts(workdir, old["inputs"]["hyp"])),
        ("b", texts(workdir, new["inputs"]["hyp"])),
    ]
    test = PairedTest(systems, metrics, [refs], test_type="bs", n_samples=samples)
    _, results = test()
    scored = [pair for name, pair in results.items() if name != "System"]
    for metric, (first, second) in zip(metrics, scored, strict=True):
        for manifest, result in ((old, first), (new, second)):
            recorded = manifest["metrics"][metric]["score"]
            if abs(result.score - recorded) > 0.01:
                raise SystemExit(
                    f"{label}: {metric} rescored {result.score:.2f}, the evaluate step "
                    f"recorded {recorded:.2f} ({manifest['metrics'][metric]['signature']})"
                )
        cells += [f"{second.score - first.score:+.2f}", f"{second.p_value:.3f}"]
    return [*means, *metrics], cells


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
    rows: list[tuple[str, str, Any, dict, dict]] = []  # direction, change, spec, old, new
    if args.ablate:
        (removed,) = parse_ablations([args.ablate])
        variant = load_recipe(args.recipe, registry, args.profile, args.sets, removed)
        label = "-" + ",".join(removed)
        ablated = {
            (direction, stage): manifest
            for direction, stages in stage_steps(variant, registry, args.workdir).items()
            for stage, manifest, _ in stages
        }
        for direction, stages in full.items():
            for stage, manifest, spec in stages:
                other = ablated.get((direction, stage))
                if other is None:
                    raise SystemExit(f"eval_{stage}_{direction}: the {label} variant has not run")
                if other["hash"] != manifest["hash"]:  # the same step: nothing to test
                    rows.append((direction, f"{stage}: full -> {label}", spec, manifest, other))
    else:
        for direction, stages in full.items():
            for (before, old, _), (after, new, spec) in pairwise(stages):
                rows.append((direction, f"{before} -> {after}", spec, old, new))
    header = False
    for direction, change, spec, old, new in rows:
        label = f"{direction} {change}"
        metrics, cells = compare(registry, args.workdir, spec, old, new, label, args.samples)
        if not header:
            print("| direction | change | " + " | ".join(f"{m} | p" for m in metrics) + " |")
            print("|---|---|" + "---:|---:|" * len(metrics))
            header = True
        print(f"| {direction} | {change} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
