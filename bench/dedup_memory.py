"""Exact deduplication of ten million pairs (or more): time and peak memory, against a plain
Python set.

The corpus is the clean-speed benchmark's real pairs (small_parallel_enja train, Tatoeba en-ja
test, gettext en-ja) repeated until there are ``--pairs`` of them, every other repeat made
distinct by a suffix, so about half the pairs are unique. Each measurement runs in a fresh
process and reports its peak RSS:

- mtcore: the clean step with only ``dedup`` (workers hash the pairs, the driver keeps a
  16-byte-a-key set of sorted NumPy runs);
- mtcore's ``dedup`` step (the same digests bucketed on disk, one bucket file in memory at a
  time, 1 byte a pair for the keep mask), ``--buckets`` files;
- baseline: the same 128-bit BLAKE2b digests in a Python ``set`` (what a script would do).

All run one worker process beside the driver; the three must keep as many pairs.

    .venv/bin/python bench/dedup_memory.py [--pairs 10000000] [--buckets 64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clean_speed import base_pairs


def make_corpus(folder: Path, total: int) -> int:
    from mtcore.contracts.step import write_artifact_meta

    pairs = base_pairs()
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(folder / "corpus.en", "wb") as en, open(folder / "corpus.ja", "wb") as ja:
        repeat = 0
        while written < total:
            take = pairs[: total - written]
            suffix = f" #{repeat}" if repeat % 2 else ""
            en.write("".join(a + suffix + "\n" for a, _ in take).encode("utf-8"))
            ja.write("".join(b + "\n" for _, b in take).encode("utf-8"))
            written += len(take)
            repeat += 1
    write_artifact_meta(folder, type="parallel", langs=["en", "ja"], name="corpus")
    return written


MTCORE = """
import json, resource, sys, time
from pathlib import Path
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import Artifact, StepContext
from mtcore_plugins.executors.local import LocalExecutor
from mtcore_plugins.steps.clean import CleanStep
from mtcore_plugins.steps.dedup import DedupStep
corpus, work, buckets = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
if buckets:
    step = DedupStep.from_dict({"buckets": buckets, "shard_size": 50_000})
else:
    step = CleanStep.from_dict({"filters": [{"name": "dedup"}], "shard_size": 50_000})
ctx = StepContext(step_id="clean", kind="clean", step_hash="bench", work=work,
    inputs={"corpus": Artifact.open(corpus)}, executor=LocalExecutor.from_dict({"workers": 1}),
    registry=load_registry(), show_progress=False)
start = time.perf_counter()
step.run(ctx)
print(json.dumps({"seconds": time.perf_counter() - start, "kept": ctx.stats["pairs_out"],
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

BASELINE = """
import hashlib, json, resource, sys, time
start = time.perf_counter()
seen = set()
with open(sys.argv[1] + "/corpus.en", "rb") as en, open(sys.argv[1] + "/corpus.ja", "rb") as ja:
    for a, b in zip(en, ja):
        seen.add(hashlib.blake2b(a[:-1] + b"\\t" + b[:-1], digest_size=16).digest())
print(json.dumps({"seconds": time.perf_counter() - start, "kept": len(seen),
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=10_000_000)
    parser.add_argument("--buckets", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        start = time.perf_counter()
        total = make_corpus(corpus, args.pairs)
        print(f"corpus: {total} pairs written in {time.perf_counter() - start:.0f} s")
        ours = measure(MTCORE, str(corpus), str(Path(tmp) / "work"), "0")
        step = measure(MTCORE, str(corpus), str(Path(tmp) / "work-step"), str(args.buckets))
        base = measure(BASELINE, str(corpus))
    print(
        f"mtcore dedup filter (clean step): {ours['seconds']:.1f} s "
        f"({total / ours['seconds']:,.0f} pairs/s), kept {ours['kept']}, "
        f"driver peak RSS {ours['rss_mb']:.0f} MB"
    )
    print(
        f"mtcore dedup step ({args.buckets} buckets): {step['seconds']:.1f} s "
        f"({total / step['seconds']:,.0f} pairs/s), kept {step['kept']}, "
        f"driver peak RSS {step['rss_mb']:.0f} MB"
    )
    print(
        f"python set of digests: {base['seconds']:.1f} s, kept {base['kept']}, "
        f"peak RSS {base['rss_mb']:.0f} MB"
    )
    print(f"peak memory filter / python set: {ours['rss_mb'] / base['rss_mb']:.2f}")
    print(f"peak memory step / python set: {step['rss_mb'] / base['rss_mb']:.2f}")
    print(f"peak memory step / filter: {step['rss_mb'] / ours['rss_mb']:.2f}")
    if not ours["kept"] == step["kept"] == base["kept"]:
        raise SystemExit("they disagree on the number of unique pairs")


if __name__ == "__main__":
    main()
