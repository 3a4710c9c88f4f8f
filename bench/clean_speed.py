"""Cleaning speed against OpusFilter 3.3.1 on the same data, same rules, in one run.

The corpus: small_parallel_enja train + the Tatoeba en-ja test set + the En-Ja pairs of this
machine's gettext catalogs, repeated ``--repeat`` times (10 by default: about a million pairs).
The chain is OpusFilter's

    LengthFilter {unit: char, min_length: 1, max_length: 500}
    LengthRatioFilter {unit: char, threshold: 6}
    LongWordFilter {threshold: 40}
    HtmlTagFilter {}
    TerminalPunctuationFilter {threshold: -2}
    NonZeroNumeralsFilter {threshold: 0.5}
    RepetitionFilter {threshold: 2, min_length: 3, max_length: 100}

and the same rules in mtcore (OpusFilter's strict ``<`` limits written as mtcore's inclusive
ones: ``inclusive: false`` for the ratio, ``max_chars: 39`` for the word length). OpusFilter
runs with ``opusfilter`` in its own venv (``bench/.venv-opusfilter``, made on first use with
``pip install opusfilter==3.3.1``); mtcore runs its clean step with 1 and 2 local workers.
Printed: pairs/s of each, the speed-up ratios, and how many keep/drop decisions agree.

    .venv/bin/python bench/clean_speed.py [--repeat 10] [--skip-opusfilter]
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "en-ja"
ENJA = DATA / "odashi+small_parallel_enja"
TATOEBA = DATA / "Helsinki-NLP+OPUS-MT-testsets" / "testsets" / "eng-jpn"

OPUSFILTER_CHAIN = [
    {"LengthFilter": {"unit": "char", "min_length": 1, "max_length": 500}},
    {"LengthRatioFilter": {"unit": "char", "threshold": 6}},
    {"LongWordFilter": {"threshold": 40}},
    {"HtmlTagFilter": {}},
    {"TerminalPunctuationFilter": {"threshold": -2}},
    {"NonZeroNumeralsFilter": {"threshold": 0.5}},
    {"RepetitionFilter": {"threshold": 2, "min_length": 3, "max_length": 100}},
]
MTCORE_CHAIN = [
    {"name": "length", "unit": "char", "min_length": 1, "max_length": 500},
    {"name": "length_ratio", "unit": "char", "max_ratio": 6, "inclusive": False},
    {"name": "long_word", "max_chars": 39, "unit": "word"},  # OpusFilter splits on spaces
    {"name": "html_tag"},
    {"name": "terminal_punctuation", "threshold": -2},
    {"name": "nonzero_numerals", "threshold": 0.5},
    {"name": "repetition", "threshold": 2, "min_length": 3, "max_length": 100},
]


def base_pairs() -> list[tuple[str, str]]:
    from mtcore.corpus import INNER_BREAKS, InputPolicy
    from mtcore.stats import Stats
    from mtcore_plugins.sources.gettext import GettextSource

    def read(path: Path) -> list[str]:
        return path.read_text(encoding="utf-8").split("\n")[:-1]

    pairs = list(zip(read(ENJA / "train.en"), read(ENJA / "train.ja"), strict=True))
    tatoeba = TATOEBA / "tatoeba-test-v2021-08-07"
    pairs += zip(read(tatoeba.with_suffix(".eng")), read(tatoeba.with_suffix(".jpn")), strict=True)
    catalogs = GettextSource.from_dict({"src": "en", "tgt": "ja"})
    for en, ja in catalogs.read(InputPolicy(empty="drop"), Stats()):
        # As the fetch step does, no line-break character survives inside a line.
        pairs.append(
            (
                INNER_BREAKS.sub(" ", en.replace("\n", " ")),
                INNER_BREAKS.sub(" ", ja.replace("\n", " ")),
            )
        )
    # OpusFilter filters and writes ``line.rstrip()``: strip trailing spaces here, for both
    # tools, so that they see the same text.
    pairs = [(en.rstrip(), ja.rstrip()) for en, ja in pairs]
    print(
        f"corpus: small_parallel_enja train {50_000}, Tatoeba en-ja test, gettext en-ja: "
        f"{len(pairs)} pairs"
    )
    return pairs


def base_pairs_sample(files: dict[str, Path]) -> list[tuple[str, str]]:
    """The first 1,000 pairs of the bench corpus: enough shards to reach every worker."""
    with open(files["en"], encoding="utf-8") as en, open(files["ja"], encoding="utf-8") as ja:
        return [(a[:-1], b[:-1]) for a, b, _ in zip(en, ja, range(1000), strict=False)]


def write_corpus(folder: Path, pairs: list[tuple[str, str]], repeat: int) -> dict[str, Path]:
    from mtcore.step import write_artifact_meta

    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for side, lang in enumerate(("en", "ja")):
        blob = "".join(p[side] + "\n" for p in pairs).encode("utf-8")
        files[lang] = folder / f"corpus.{lang}"
        with open(files[lang], "wb") as handle:
            for _ in range(repeat):
                handle.write(blob)
    write_artifact_meta(folder, type="parallel", langs=["en", "ja"], name="corpus")
    return files


def run_opusfilter(files: dict[str, Path], work: Path) -> tuple[float, Path]:
    from _opusfilter import opusfilter_bin

    command = opusfilter_bin()
    out = work / "opusfilter"
    out.mkdir()
    config = {
        "common": {"output_directory": str(out)},
        "steps": [
            {
                "type": "filter",
                "parameters": {
                    "inputs": [str(files["en"]), str(files["ja"])],
                    "outputs": ["out.en", "out.ja"],
                    "filters": OPUSFILTER_CHAIN,
                },
            }
        ],
    }
    path = work / "opusfilter.yaml"
    path.write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    subprocess.run(
        [str(command), str(path)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start, out


def run_mtcore(
    corpus: Path, work: Path, executor: Any, shard_size: int = 20_000
) -> tuple[float, Path]:
    from mtcore.registry import load_registry
    from mtcore.step import Artifact, StepContext
    from mtcore_plugins.steps.clean import CleanStep

    step = CleanStep.from_dict({"filters": MTCORE_CHAIN, "shard_size": shard_size})
    ctx = StepContext(
        step_id="clean",
        kind="clean",
        step_hash="bench",
        work=work,
        inputs={"corpus": Artifact.open(corpus)},
        executor=executor,
        registry=load_registry(),
        show_progress=False,
    )
    start = time.perf_counter()
    step.run(ctx)  # type: ignore[arg-type]
    return time.perf_counter() - start, work / "corpus"


def warm_executor(workers: int, sample: Path, work: Path) -> tuple[Any, float]:
    """A local executor whose worker processes have started, built the chain and loaded the
    compiled kernels (a one-off cost per step, about a second, excluded from the rates)."""
    from mtcore_plugins.executors.local import LocalExecutor

    executor = LocalExecutor.from_dict({"workers": workers})
    start = time.perf_counter()
    run_mtcore(sample, work, executor, shard_size=100)
    return executor, time.perf_counter() - start


def kept_mask(inputs: dict[str, Path], outputs: dict[str, Path]) -> list[bool]:
    """Which input pairs appear in the output (both are in corpus order)."""

    def lines(path: Path) -> list[str]:
        return path.read_text(encoding="utf-8").split("\n")[:-1]

    source = list(zip(lines(inputs["en"]), lines(inputs["ja"]), strict=True))
    kept = list(zip(lines(outputs["en"]), lines(outputs["ja"]), strict=True))
    mask, j = [], 0
    for pair in source:
        hit = j < len(kept) and kept[j] == pair
        mask.append(hit)
        j += hit
    if j != len(kept):
        raise SystemExit("output is not a subsequence of the input")
    return mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--skip-opusfilter", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = write_corpus(work / "input", base_pairs(), args.repeat)
        total = files["en"].read_bytes().count(b"\n")
        print(f"bench corpus: {total} pairs ({args.repeat} repeats)")
        sample = write_corpus(work / "warm", base_pairs_sample(files), 1)["en"].parent
        results = {}
        for workers in (1, 2):
            executor, startup = warm_executor(workers, sample, work / f"warm-{workers}")
            try:
                seconds, out = run_mtcore(files["en"].parent, work / f"mtcore-{workers}", executor)
            finally:
                executor.close()
            results[workers] = (seconds, out)
            rate = total / seconds
            print(
                f"mtcore clean, {workers} worker(s): {seconds:.2f} s, {rate:,.0f} pairs/s "
                f"(start-up before it, not counted: {startup:.1f} s)"
            )
        one = results[1][0]
        print(f"mtcore 2 workers vs 1: {one / results[2][0]:.2f}x")
        if args.skip_opusfilter:
            return
        peer, peer_out = run_opusfilter(files, work)
        print(f"OpusFilter 3.3.1: {peer:.2f} s, {total / peer:,.0f} pairs/s")
        print(f"mtcore 1 worker vs OpusFilter: {peer / one:.1f}x")
        print(f"mtcore 2 workers vs OpusFilter: {peer / results[2][0]:.1f}x")
        ours = kept_mask(files, {lang: results[1][1] / f"corpus.{lang}" for lang in files})
        theirs = kept_mask(files, {lang: peer_out / f"out.{lang}" for lang in files})
        agree = sum(a == b for a, b in zip(ours, theirs, strict=True))
        print(
            f"keep/drop agreement with OpusFilter: {agree}/{len(ours)} "
            f"({100 * agree / len(ours):.3f} %); kept: mtcore {sum(ours)}, OpusFilter {sum(theirs)}"
        )
        two = kept_mask(files, {lang: results[2][1] / f"corpus.{lang}" for lang in files})
        print(f"1 worker and 2 workers identical: {ours == two}")


if __name__ == "__main__":
    main()
