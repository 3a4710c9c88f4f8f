"""Cleaning quality: what each recipe's paper-profile cleaning chains keep of clean human
translations and drop of labeled defects, beside OpusFilter's closest equivalent chain.

For each recipe's language pair: up to ``--max-pairs`` clean pairs (WMT21-23 news/general test
sets, source and reference, both directions; zh-ja: IWSLT20's evaluation set) and
``--per-defect`` copies of other clean pairs with one injected defect each (a third-language
side, a copy of the source, a misaligned target, appended markup, character repetition,
truncation, a repeated side, an empty side, an exact duplicate). Each chain runs through real
``clean`` steps (``mtcore_plugins.steps.clean``, one worker), its ranked cuts (``keep``) once
with and once without them; OpusFilter 3.3.1 (``bench/.venv-opusfilter``, made on first use)
runs its closest equivalent chain on the same files. Printed per chain: clean pairs kept and
each defect's drop rate, both tools side by side, the target and whether it is met, and which
filter drops the clean pairs that go. Needs ../shared/data; never run by the tests.

    .venv/bin/python bench/cleaning_quality.py [--recipe nt5|yishu|xiaomi|hwtsc|all]
        [--max-pairs 3000] [--per-defect 300] [--seed 1] [--skip-opusfilter]
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _cleaning_chains import (
    CHAINS,
    ChainSpec,
    Outcome,
    before_cuts,
    chain_targets,
    run_chain,
    stages,
)
from _cleaning_data import (
    DEFECTS,
    DefectContext,
    Labeled,
    build,
    human_pairs,
    monolingual,
    third_language as third,
)

NOTE_WIDTH = 28


@dataclass
class Result:
    """One chain's outcomes on the labeled pairs: with its cuts, without them (None when it
    has none), OpusFilter's kept mask (None when skipped) and the targets."""

    spec: ChainSpec
    labeled: Labeled
    final: Outcome
    before_cut: Outcome | None
    opus: np.ndarray | None
    targets: dict[str, float | None]


def labeled_pairs(langs: tuple[str, str], clean: int, per_defect: int, seed: int) -> Labeled:
    pool = human_pairs(*langs)
    others = (monolingual(third(langs[0], langs)), monolingual(third(langs[1], langs)))
    labeled = build(pool, DefectContext(langs, pool, others), clean, per_defect, seed)
    counts = collections.Counter(labeled.labels)
    print(
        f"{'-'.join(langs)}: pool {len(pool)} clean pairs; {counts['clean']} clean + "
        f"{per_defect} x {len(DEFECTS)} defective (third language: "
        f"{third(langs[0], langs)} / {third(langs[1], langs)} sentences)",
        flush=True,
    )
    return labeled


def rates(mask: np.ndarray, labels: Sequence[str]) -> dict[str, float]:
    """Kept rate of the clean pairs, drop rate of each defect."""
    out = {}
    array = np.asarray(labels)
    for label in ["clean", *DEFECTS]:
        rows = array == label
        kept = float(mask[rows].mean()) if rows.any() else float("nan")
        out[label] = kept if label == "clean" else 1 - kept
    return out


def run_one(spec: ChainSpec, labeled: Labeled, work: Path, args: Any, env: Env) -> Result:
    from _cleaning_opus import plan, run as run_opus

    chain, notes = stages(spec, env.registry)
    print(f"\n== {spec.title}", flush=True)
    for note in notes:
        print(f"   note: {note}")
    for stage in chain:
        print(f"   {stage.step}: {', '.join(stage.names()) or '(nothing runnable)'}")
        for label, why in stage.skipped:
            print(f"   left out {label}: {why}")
    final = run_chain(chain, labeled.pairs, spec.langs, work / "cut", env.executor, env.registry)
    before = before_cuts(
        chain, final, labeled.pairs, spec.langs, work / "plain", env.executor, env.registry
    )
    opus = None
    if not args.skip_opusfilter:
        steps, mapping = plan(chain, spec.langs, env.registry)
        print("   OpusFilter 3.3.1 equivalents:")
        for label, names, note in mapping:
            print(f"     {label:<{NOTE_WIDTH}} -> {names}{f' ({note})' if note else ''}")
        start = time.perf_counter()
        opus = run_opus(steps, labeled.pairs, spec.langs, work / "opusfilter")
        print(f"   OpusFilter: {time.perf_counter() - start:.1f} s", flush=True)
    print(f"   mtcore: {final.seconds + (before.seconds if before else 0):.1f} s", flush=True)
    return Result(spec, labeled, final, before, opus, chain_targets(chain, env.registry))


def _pct(value: float | None) -> str:
    return "-" if value is None or value != value else f"{100 * value:5.1f} %"


def report(result: Result) -> list[str]:
    """Prints the chain's table; returns its missed targets."""
    labels = result.labeled.labels
    final = rates(result.final.kept, labels)
    plain = rates(result.before_cut.kept, labels) if result.before_cut else final
    opus = rates(result.opus, labels) if result.opus is not None else None
    counts = collections.Counter(labels)
    cut = result.before_cut is not None
    print(
        f"   {'kept | dropped':16}{'n':>6}  {'mtcore':>8}  {'+ cut':>8}  {'OpusF.':>8}  "
        f"{'target':>8}  {'met':>4}  {'vs OpusF.':>9}  main mtcore filter"
    )
    missed = []
    for label in ["clean", *DEFECTS]:
        # the clean target is the rule stages' (before declared cuts), a defect's the output's
        ours = plain[label] if label == "clean" else final[label]
        target = result.targets.get(label)
        met = "-" if target is None else ("yes" if ours >= target else "NO")
        if met == "NO":
            missed.append(f"{label} {_pct(ours).strip()} < {_pct(target).strip()}")
        versus = "-"
        if opus is not None and target is not None:
            theirs = opus[label]
            versus = "ahead" if ours > theirs else "tie" if ours == theirs else "behind"
            if versus == "behind":
                missed.append(f"{label} behind OpusFilter ({_pct(theirs).strip()})")
        print(
            f"   {label:16}{counts[label]:>6}  "
            f"{_pct(plain[label]):>8}  {_pct(final[label]) if cut else '-':>8}  "
            f"{_pct(opus[label]) if opus else '-':>8}  "
            f"{('>= ' + _pct(target).strip()) if target else 'n/t':>8}  {met:>4}  {versus:>9}  "
            f"{_main_filter(result.final, labels, label)}"
        )
    _clean_drops(result)
    return missed


def _main_filter(outcome: Outcome, labels: Sequence[str], label: str) -> str:
    by = [d for d, lab in zip(outcome.dropped_by, labels, strict=True) if lab == label and d]
    if not by:
        return ""
    name, count = collections.Counter(by).most_common(1)[0]
    return f"{name} ({count}/{len(by)})"


def _clean_drops(result: Result) -> None:
    by = [
        d
        for d, lab in zip(result.final.dropped_by, result.labeled.labels, strict=True)
        if lab == "clean" and d
    ]
    total = result.labeled.labels.count("clean")
    print(f"   clean pairs dropped, by first rejecting filter (of {total}):")
    for name, count in sorted(collections.Counter(by).items(), key=lambda kv: -kv[1]):
        print(f"     {name:<{NOTE_WIDTH}} {count:>5}  {_pct(count / total)}")
    if not by:
        print("     (none)")


@dataclass
class Env:
    registry: Any
    executor: Any


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--recipe", choices=[*CHAINS, "all"], default="all")
    parser.add_argument("--max-pairs", type=int, default=3000, help="clean pairs per language pair")
    parser.add_argument("--per-defect", type=int, default=300, help="defective pairs per defect")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-opusfilter", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from mtcore.contracts.registry import load_registry
    from mtcore_plugins.executors.local import LocalExecutor

    env = Env(load_registry(), LocalExecutor(LocalExecutor.Config(workers=1)))
    recipes = list(CHAINS) if args.recipe == "all" else [args.recipe]
    start = time.perf_counter()
    data: dict[tuple[str, str], Labeled] = {}
    missed: dict[str, list[str]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for number, spec in enumerate(s for r in recipes for s in CHAINS[r]):
                if spec.langs not in data:
                    data[spec.langs] = labeled_pairs(
                        spec.langs, args.max_pairs, args.per_defect, args.seed
                    )
                result = run_one(spec, data[spec.langs], Path(tmp) / str(number), args, env)
                missed[spec.title] = report(result)
    finally:
        env.executor.close()
    print(f"\ntotal {time.perf_counter() - start:.0f} s; targets missed (or behind OpusFilter):")
    for title, misses in missed.items():
        print(f"  {title}: {'; '.join(misses) if misses else 'none'}")


if __name__ == "__main__":
    main()
