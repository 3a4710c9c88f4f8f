"""A ``mtcore export --format huggingface`` directory used as a Hugging Face user would (issue
71): ``pipeline("translation", model=DIR)`` with no other argument, on the source lines the run
fed the exported step (its ``corpus`` input: after the run's preprocessing, e.g. truecasing),
against that step's own output (its ``hyp`` before post-processing). Prints the share of lines
that are identical, the first differences, and the seconds ``pipeline`` takes for the first
``--time`` lines (one call, loading excluded).

Only transformers reads the directory; the workdir is read for the two text files, located by
the step's manifest (``steps/<id>-<hash>/``).

    .venv/bin/python -m mtcore.cli export recipes/nt5.yaml -w WORK -d en-ja -s ft \\
        --format huggingface -o /tmp/enja
    OMP_NUM_THREADS=2 .venv/bin/python bench/hf_pipeline.py /tmp/enja -w WORK [--time 30]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def step_files(workdir: Path, step: str, src: str, tgt: str) -> tuple[Path, Path]:
    """The exported step's source lines (its corpus input's ``src`` column) and its output."""
    (folder,) = (workdir / "steps").glob(f"{step}-*/")
    manifest = json.loads((folder / "manifest.json").read_text())
    corpus = manifest["inputs"]["corpus"]
    source = workdir / "steps" / f"{corpus['step']}-{corpus['hash']}" / corpus["output"]
    return source / f"corpus.{src}", folder / "hyp" / f"hyp.{tgt}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("-w", "--workdir", type=Path, required=True)
    parser.add_argument("--time", type=int, default=30, help="lines timed")
    args = parser.parse_args()
    info = json.loads((args.directory / "mtcore_export.json").read_text())
    source, hyp = step_files(args.workdir, info["step"], info["src"], info["tgt"])
    lines = source.read_text(encoding="utf-8").splitlines()
    expected = hyp.read_text(encoding="utf-8").splitlines()

    from transformers import pipeline  # the client: nothing of mtcore from here on

    translate = pipeline("translation", model=str(args.directory))
    start = time.perf_counter()
    translate(lines[: args.time])
    seconds = time.perf_counter() - start
    got = [found["translation_text"] for found in translate(lines)]
    same = [a == b for a, b in zip(got, expected, strict=True)]
    share = sum(same) / len(same)
    print(
        f"{info['step']} ({info['src']}-{info['tgt']}, {info['architecture']}, "
        f"{info['quantization']}): {sum(same)}/{len(same)} lines identical to the run's "
        f"({share:.1%}); pipeline {seconds:.2f} s for {args.time} lines"
    )
    for index in [i for i, s in enumerate(same) if not s][:5]:
        print(f"line {index}:\n  run:      {expected[index]}\n  pipeline: {got[index]}")


if __name__ == "__main__":
    main()
