"""The data path at corpus scale: ingestion, normalize, clean (rules + dedup) and split of 5M,
20M and 50M pairs, with time, peak memory and disk use at each size.

The corpus: every WMT21-23 source line of a pair with each system's output of it, both
directions (zh-en by default), a tenth given a crawl-like defect (``_cleaning_data``), then
repeated with variation until the size is reached: repeat ``r`` numbers every pair (``r. ``
before both sides, as crawled lists are numbered), so that deduplication keeps the pairs of
every repeat and drops the pool's own duplicates (several systems giving the same output).

Each size is one ``mtcore run`` of a four-step recipe in a child process with two local workers,
the plain files as the data entry: fetch (the sharded reader), ``normalize`` (unicode +
whitespace), ``clean`` (six of OpusFilter's rules as in ``clean_speed.py``, all but
``long_word``, then ``dedup`` of pairs) and ``split`` (2,000 + 2,000 held out). Printed per
size: each step's seconds and pairs/s; the whole run's seconds per million pairs against the
smallest size (linear within 15 %: ratio 1.00 +- 0.15); the driver's peak RSS beside its
start-up RSS plus dedup's 16 bytes a kept pair; the largest worker's peak RSS; and the disk
each step's outputs take (files linked to the input counted apart). Each size's input and
workdir are deleted before the next one.

    .venv/bin/python bench/scale.py [--sizes 5,20,50] [--pair zh-en] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from clean_speed import MTCORE_CHAIN  # noqa: E402

STEPS = ("raw", "normalize", "clean", "split")
# clean_speed's chain without OpusFilter's space-split long_word rule, which drops a quarter of
# the unsegmented Chinese lines as one long "word" (mtcore's own unit, jieba tokens, would
# measure the segmenter instead of the data path)
CHAIN = [entry for entry in MTCORE_CHAIN if entry["name"] != "long_word"]
DEDUP_BYTES = 16  # plugins/filters/dedup.py: one 16-byte digest a kept key


def build_input(folder: Path, langs: tuple[str, str], pairs: int) -> tuple[dict[str, Path], int]:
    """``pairs`` numbered pairs in ``raw.<lang>`` files; returns them and their bytes."""
    from _cleaning_data import news_corpus

    pool, _ = news_corpus(*langs, 0)  # one pass of the pool with its defects
    sides = [[p[side].encode("utf-8") + b"\n" for p in pool] for side in (0, 1)]
    folder.mkdir(parents=True, exist_ok=True)
    files = {lang: folder / f"raw.{lang}" for lang in langs}
    handles = [open(files[lang], "wb") for lang in langs]  # noqa: SIM115 (closed below)
    try:
        left, repeat = pairs, 0
        while left:
            take = min(left, len(pool))
            prefix = f"{repeat + 1}. ".encode()
            for handle, lines in zip(handles, sides, strict=True):
                handle.write(b"".join(prefix + line for line in lines[:take]))
            left -= take
            repeat += 1
    finally:
        for handle in handles:
            handle.close()
    return files, sum(f.stat().st_size for f in files.values())


def recipe(files: dict[str, Path]) -> dict[str, object]:
    return {
        "name": "scale",
        "executor": {"workers": 2},
        "data": {"raw": {"source": "local", "files": {k: str(v) for k, v in files.items()}}},
        "steps": {
            "normalize": {
                "kind": "normalize",
                "inputs": {"corpus": "raw"},
                "processors": ["unicode", "whitespace"],
            },
            "clean": {
                "kind": "clean",
                "inputs": {"corpus": "normalize"},
                "filters": [*CHAIN, {"name": "dedup", "key": "pair"}],
            },
            "split": {
                "kind": "split",
                "inputs": {"corpus": "clean"},
                "valid_size": 2000,
                "test_size": 2000,
            },
        },
    }


def child(recipe_path: str, workdir: str) -> None:
    """Runs the recipe in this process and prints its peak RSS figures as JSON."""
    import logging

    from mtcore.contracts.registry import load_registry
    from mtcore.recipe.load import load_recipe
    from mtcore.run.runner import Runner

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("mtcore").setLevel(logging.WARNING)
    registry = load_registry()
    loaded = load_recipe(Path(recipe_path), registry)
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    Runner(loaded, registry, Path(workdir), show_progress=False).run()
    print(
        json.dumps(
            {
                "start_kib": start_rss,
                "driver_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "workers_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
            }
        )
    )


def disk_use(step_dir: Path) -> tuple[int, int]:
    """Bytes the step's files take on disk: own files, files hard-linked to others."""
    own = linked = 0
    for path in step_dir.rglob("*"):
        if path.is_file():
            st = path.stat()
            if st.st_nlink > 1:
                linked += st.st_blocks * 512
            else:
                own += st.st_blocks * 512
    return own, linked


def gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"


def one_size(millions: float, langs: tuple[str, str], work: Path) -> float:
    pairs = int(millions * 1_000_000)
    start = time.perf_counter()
    files, size = build_input(work / "input", langs, pairs)
    print(
        f"\n== {pairs:,} pairs ({gib(size)} of input, written in "
        f"{time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    path = work / "scale.yaml"
    path.write_text(yaml.safe_dump(recipe(files), sort_keys=False))
    env = {**os.environ, "MTCORE_CACHE": str(work / "cache"), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(path), str(work / "w")],
        check=True,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    seconds = time.perf_counter() - start
    memory = json.loads(done.stdout.strip().splitlines()[-1])
    for step in STEPS:
        (step_dir,) = (work / "w" / "steps").glob(f"{step}-*")
        manifest = json.loads((step_dir / "manifest.json").read_text())
        took = manifest["seconds"]
        own, linked = disk_use(step_dir)
        counts = manifest["counts"]
        shown = {k: v for k, v in counts.items() if k.startswith(("pairs", "dropped.")) and v}
        print(
            f"{step:>9}: {took:7.1f} s, {pairs / took:>10,.0f} pairs/s; disk {gib(own)}"
            + (f" + {gib(linked)} linked to the input" if linked else "")
            + f"; {shown}"
        )
    kept = json.loads(next((work / "w" / "steps").glob("clean-*/manifest.json")).read_text())
    expected = memory["start_kib"] * 1024 + DEDUP_BYTES * kept["counts"]["pairs_out"]
    print(
        f"whole run: {seconds:.1f} s ({seconds / millions:.1f} s per million pairs); driver "
        f"peak RSS {gib(memory['driver_kib'] * 1024)} (start-up {gib(memory['start_kib'] * 1024)}"
        f" + dedup's {DEDUP_BYTES} B x {kept['counts']['pairs_out']:,} kept = {gib(expected)}); "
        f"largest worker {gib(memory['workers_kib'] * 1024)}",
        flush=True,
    )
    return seconds / millions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="5,20,50", help="millions of pairs, comma-separated")
    parser.add_argument("--pair", default="zh-en")
    parser.add_argument("--work", type=Path, help="where inputs and workdirs go (default: /tmp)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    langs = tuple(args.pair.split("-"))
    assert len(langs) == 2
    per_million = {}
    for size in (float(s) for s in args.sizes.split(",")):
        work = Path(tempfile.mkdtemp(prefix="mtcore-scale-", dir=args.work))
        try:
            per_million[size] = one_size(size, langs, work)  # type: ignore[arg-type]
        finally:
            shutil.rmtree(work, ignore_errors=True)
    base = min(per_million)
    print("\nseconds per million pairs against the smallest size (linear: 1.00 +- 0.15):")
    for size, value in per_million.items():
        print(f"  {size:g}M: {value / per_million[base]:.2f}")


if __name__ == "__main__":
    main()
