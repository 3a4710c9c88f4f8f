"""Is each stage's change significant? sacrebleu's paired bootstrap resampling (Koehn 2004)
between consecutive stages of a finished run: every ``eval_<stage>_<direction>`` step of the
recipe, in recipe order, compared with the stage above it on the same test set.

    .venv/bin/python scripts/stage_significance.py recipes/yishu.yaml -p small -w work/yishu-small

Run from where the recipe was run (local corpus paths are resolved against the current
directory, and they are part of the step hashes). BLEU uses the tokenizer of the evaluate
step's signature; chrF sacrebleu's defaults, as the evaluate steps do.
"""

from __future__ import annotations

import argparse
import re
from itertools import pairwise
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from mtcore.corpus import Corpus
from mtcore.plan import make_plan, step_dir
from mtcore.recipe import build_recipe, read_yaml
from mtcore.registry import load_registry
from mtcore.report import STAGE_STEP
from mtcore.runner import is_complete, read_manifest


def texts(workdir: Path, reference: dict[str, str], lang: str | None = None) -> list[str]:
    corpus = Corpus.open(
        workdir / "steps" / f"{reference['step']}-{reference['hash']}" / reference["output"]
    )
    column = corpus.langs.index(lang) if lang else 0
    return [pair[column] for pair in corpus]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--profile", "-p", default=None, help="profile (default: the recipe's)")
    parser.add_argument("--workdir", "-w", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    args = parser.parse_args()
    registry = load_registry()
    recipe = build_recipe(read_yaml(args.recipe), registry, args.profile, source=str(args.recipe))
    by_direction: dict[str, list[tuple[str, dict]]] = {}
    for planned in make_plan(recipe, registry):
        match = STAGE_STEP.match(planned.id)
        path = step_dir(args.workdir, planned)
        if match and is_complete(path):
            by_direction.setdefault(match["direction"], []).append(
                (match["stage"], read_manifest(path))
            )
    print("| direction | change | BLEU | p | chrF | p |")
    print("|---|---|---:|---:|---:|---:|")
    for direction, stages in by_direction.items():
        for (before, old), (after, new) in pairwise(stages):
            lang = next(iter(new["metrics"].values()))["direction"].split("-")[-1]
            refs = texts(args.workdir, new["inputs"]["ref"], lang)
            tok = re.search(r"tok:([^|]+)", new["metrics"]["BLEU"]["signature"])
            metrics = {"BLEU": BLEU(tokenize=tok[1] if tok else None), "chrF": CHRF()}
            systems = [
                (before, texts(args.workdir, old["inputs"]["hyp"])),
                (after, texts(args.workdir, new["inputs"]["hyp"])),
            ]
            test = PairedTest(systems, metrics, [refs], test_type="bs", n_samples=args.samples)
            _, results = test()
            cells = []
            for metric, (first, second) in results.items():  # "System", then the metrics
                if metric == "System":
                    continue
                cells += [f"{second.score - first.score:+.2f}", f"{second.p_value:.3f}"]
            print(f"| {direction} | {before} -> {after} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
