"""Memory stays flat as a corpus grows: fetch + clean over 1x and 10x of a real corpus.

Runs the same two-step recipe on small_parallel_enja (50k pairs) repeated 1 and 10 times, each
in a fresh process, and prints wall time, pairs/s and peak RSS, with the 10x/1x ratios. A flat
memory profile gives an RSS ratio near 1 (the dedup set, 16 bytes a unique pair, is the only
thing that grows).

    .venv/bin/python bench/clean_memory.py [--repeat 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

DATA = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "data"
    / "en-ja"
    / "odashi+small_parallel_enja"
)


def make_corpus(dest: Path, repeat: int) -> dict[str, str]:
    files = {}
    for lang in ("en", "ja"):
        text = (DATA / f"train.{lang}").read_bytes()
        path = dest / f"train.x{repeat}.{lang}"
        with open(path, "wb") as handle:
            for _ in range(repeat):
                handle.write(text)
        files[lang] = str(path)
    return files


def run_once(files: dict[str, str], workdir: Path, workers: int) -> dict[str, float]:
    recipe = {
        "name": "bench",
        "executor": {"workers": workers},
        "data": {"bitext": {"source": "local", "files": files}},
        "steps": {
            "clean": {
                "kind": "clean",
                "inputs": {"corpus": "bitext"},
                "filters": [
                    {"name": "length", "max_length": 500},
                    {"name": "length_ratio", "max_ratio": 6},
                    {"name": "dedup"},
                ],
            }
        },
    }
    path = workdir / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.time()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mtcore.cli",
            "run",
            str(path),
            "-w",
            str(workdir / "w"),
            "-q",
        ],
        check=True,
        capture_output=True,
    )
    seconds = time.time() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    manifest = json.loads(next((workdir / "w" / "steps").glob("clean-*/manifest.json")).read_text())
    pairs = manifest["counts"]["pairs_in"]
    return {
        "pairs": pairs,
        "seconds": seconds,
        "pairs_per_s": pairs / seconds,
        "peak_rss_mib": max(peak, before) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results = {}
        for repeat in (1, args.repeat):
            work = root / f"x{repeat}"
            work.mkdir()
            results[repeat] = run_once(make_corpus(work, repeat), work, args.workers)
            r = results[repeat]
            print(
                f"x{repeat:<3} pairs={r['pairs']:>8} wall={r['seconds']:6.1f}s "
                f"pairs/s={r['pairs_per_s']:8.0f} peak RSS={r['peak_rss_mib']:6.0f} MiB"
            )
        small, big = results[1], results[args.repeat]
        print(
            f"ratio x{args.repeat}/x1: pairs {big['pairs'] / small['pairs']:.1f}, "
            f"wall {big['seconds'] / small['seconds']:.2f}, "
            f"peak RSS {big['peak_rss_mib'] / small['peak_rss_mib']:.2f}"
        )


if __name__ == "__main__":
    main()
