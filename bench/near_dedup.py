"""Near-duplicate removal at scale: the ``near_dedup`` step's time and peak memory on a large
synthetic-from-real corpus, and its precision and recall against brute-force Jaccard.

The corpus: ``--pairs`` pairs, each side three (``--sentences``) random WMT21-23 sentences of
its language joined (English and Japanese drawn apart, so two pairs rarely share much); a share
``--dup-rate`` of them is instead a crawler's variant of an earlier pair (other digits, other
punctuation and spacing, or upper case). The step runs through the runner (local source,
``--workers`` processes), beside exact dedup (the ``dedup`` filter in a ``clean`` step, and
the ``dedup`` step) on the same corpus as the baseline; printed: seconds,
peak RSS of the driver and of the worker processes, pairs removed and the injected variants
removed (recall on the labels). Then on a sample of ``--sample`` pairs (a quarter of them
variants): every pair of pairs compared by the Jaccard similarity of their 5-gram sets, which
pairs share a cluster: recall of pairs at >= 0.8 and the share of joined pairs below 0.5.

    .venv/bin/python bench/near_dedup.py [--pairs 1000000] [--dup-rate 0.05] [--workers 2]
        [--sample 3000] [--keep WORKDIR] [--sentences 3 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import re
import resource
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from _cleaning_data import human_pairs, monolingual

Pairs = list[tuple[str, str]]


def variant(text: str, rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0 and re.search(r"\d", text):
        return re.sub(r"\d", lambda _: str(rng.randrange(10)), text)
    if kind == 1:
        return text.replace(",", " ;").replace(".", "!").replace("。", "\uff01") + " "
    return text.upper()


def write_corpus(
    folder: Path,
    pools: tuple[list[str], list[str]],
    count: int,
    rate: float,
    seed: int,
    sentences: tuple[int, int] = (3, 3),
) -> int:
    """Writes ``pairs.en`` / ``pairs.ja``; returns how many lines are injected variants (their
    line numbers go to ``injected.npy``)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    injected = []
    recent: list[tuple[str, str]] = []
    with (
        open(folder / "pairs.en", "w", encoding="utf-8") as en,
        open(folder / "pairs.ja", "w", encoding="utf-8") as ja,
    ):
        for line in range(count):
            if recent and rng.random() < rate:
                a, b = rng.choice(recent)
                pair = (variant(a, rng), variant(b, rng))
                injected.append(line)
            else:
                en_pool, ja_pool = pools
                pair = (
                    " ".join(en_pool[rng.randrange(len(en_pool))] for _ in range(sentences[0])),
                    "".join(ja_pool[rng.randrange(len(ja_pool))] for _ in range(sentences[1])),
                )
                if len(recent) < 100_000:
                    recent.append(pair)
                else:
                    recent[rng.randrange(len(recent))] = pair
            en.write(pair[0] + "\n")
            ja.write(pair[1] + "\n")
    np.save(folder / "injected.npy", np.array(injected, dtype=np.int64))
    return len(injected)


def run_step(
    folder: Path, work: Path, step: dict, workers: int
) -> tuple[float, dict, float, float]:
    """Runs in a child process of its own: the run's seconds, the step's counts, and the
    peak RSS (GiB) of this process (the driver) and of its largest worker."""
    from mtcore.contracts.registry import load_registry
    from mtcore.recipe.load import build_recipe
    from mtcore.run.runner import Runner

    registry = load_registry()
    doc = {
        "name": "bench",
        "directions": ["en-ja"],
        "executor": {"workers": workers},
        "data": {
            "pool": {
                "source": "local",
                "files": {"en": str(folder / "pairs.en"), "ja": str(folder / "pairs.ja")},
            }
        },
        "steps": {"step": {**step, "inputs": {"corpus": "pool"}}},
    }
    runner = Runner(build_recipe(doc, registry), registry, work, show_progress=False)
    start = time.perf_counter()
    result = runner.run()
    seconds = time.perf_counter() - start
    counts = result.manifest("step")["counts"]
    driver = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return seconds, counts, driver, children


def sample_quality(pool: Pairs, size: int, seed: int, sentences: tuple[int, int]) -> None:
    from mtcore_plugins.steps import _minhash as minhash

    rng = random.Random(seed)
    base = []
    for _ in range(size * 3 // 4):
        en = " ".join(pool[rng.randrange(len(pool))][0] for _ in range(sentences[0]))
        ja = "".join(pool[rng.randrange(len(pool))][1] for _ in range(sentences[1]))
        base.append((en, ja))
    texts = ["\t".join(p) for p in base]
    texts += ["\t".join(variant(t, rng) for t in rng.choice(base)) for _ in range(size - len(base))]
    a, b = minhash.hash_params(14 * 8, 1)
    hashes, sigs = minhash.signatures(texts, 5, a, b, 14, 8)
    with tempfile.TemporaryDirectory() as tmp:
        store = minhash.Buckets(Path(tmp), 16)
        store.add(hashes, 0)
        store.close()
        edges = (  # the step's default check of each candidate: estimated similarity >= 0.7
            (first[keep], other[keep])
            for first, other in store.edges()
            for keep in [minhash.similarity(sigs, first, other) >= 0.7]
        )
        roots = minhash.union_find(len(texts), edges)
    sets = []
    for t in texts:
        norm = minhash.normalize_for_minhash(t)
        sets.append({norm[i : i + 5] for i in range(max(1, len(norm) - 4))})
    close = close_joined = joined = joined_low = 0
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            same = bool(roots[i] == roots[j])
            inter = len(sets[i] & sets[j])
            jac = inter / len(sets[i] | sets[j]) if inter else 0.0
            if jac >= 0.8:
                close += 1
                close_joined += same
            if same:
                joined += 1
                joined_low += jac < 0.5
    print(
        f"sample of {len(texts)} ({len(texts) - len(base)} variants), "
        f"{len(texts) * (len(texts) - 1) // 2:,} pairs of pairs compared by brute force:\n"
        f"  recall at Jaccard >= 0.8: {close_joined}/{close} = "
        f"{100 * close_joined / max(1, close):.2f} %\n"
        f"  joined pairs below 0.5 (chance collisions and chains): {joined_low}/{joined} = "
        f"{100 * joined_low / max(1, joined):.2f} %"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--dup-rate", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sample", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, help="workdir to keep (else a temp)")
    parser.add_argument(
        "--sentences",
        type=int,
        nargs=2,
        default=(3, 3),
        metavar=("EN", "JA"),
        help="sentences joined per side (2 1 at 50M pairs: about 17 GB of corpus, not 34)",
    )
    args = parser.parse_args()
    pool = human_pairs("en", "ja") + [(b, a) for a, b in human_pairs("ja", "en")]
    print(f"pool: {len(pool)} real WMT21-23 En-Ja pairs", flush=True)
    sentences = (args.sentences[0], args.sentences[1])
    sample_quality(pool, args.sample, args.seed, sentences)
    root = args.keep or Path(tempfile.mkdtemp(prefix="near-dedup-"))
    try:
        start = time.perf_counter()
        pools = (monolingual("en", 1_000_000), monolingual("ja", 1_000_000))
        print(f"sentences: {len(pools[0]):,} English, {len(pools[1]):,} Japanese", flush=True)
        injected = write_corpus(
            root / "data", pools, args.pairs, args.dup_rate, args.seed, sentences
        )
        size = sum(f.stat().st_size for f in (root / "data").glob("pairs.*"))
        print(
            f"corpus: {args.pairs:,} pairs, {size / 2**30:.2f} GiB, {injected:,} variants "
            f"({time.perf_counter() - start:.0f} s to write)",
            flush=True,
        )
        rows = []
        for label, step in (
            ("exact (clean: dedup)", {"kind": "clean", "filters": [{"name": "dedup"}]}),
            ("exact (dedup step)", {"kind": "dedup"}),
            ("near_dedup", {"kind": "near_dedup"}),
        ):
            work = root / label.replace(" ", "_").strip("()")
            spawn = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(1, mp_context=spawn) as pool_:
                job = pool_.submit(run_step, root / "data", work, step, args.workers)
                seconds, counts, driver, worker = job.result()
            removed = counts.get("pairs_in", args.pairs) - counts.get("pairs_out", 0)
            rows.append((label, seconds, removed, driver, worker))
            shutil.rmtree(work, ignore_errors=True)
            print(f"  {label}: {seconds:.0f} s (whole run), removed {removed:,}", flush=True)
        print(
            f"\n{'step':24} {'run s':>8} {'removed':>12} {'vs injected':>12} "
            f"{'driver GiB':>11} {'worker GiB':>11}"
        )
        for label, seconds, removed, driver, worker in rows:
            print(
                f"{label:24} {seconds:8.0f} {removed:12,} {removed / max(1, injected):11.2f}x "
                f"{driver:11.2f} {worker:11.2f}"
            )
        print(f"near_dedup / exact dedup (clean) time: {rows[2][1] / rows[0][1]:.2f}x")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
