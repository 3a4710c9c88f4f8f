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

``--corpus news`` measures the data path on news-length sentences instead (issue 24): every
WMT21-23 source line of a pair with each system's output of it, both directions (zh-en: CJK,
cs-en: Latin), repeated to ``--pairs`` pairs (1M by default) with a tenth of each repeat given a
crawl-like defect (markup, repeated characters, truncation, a repeated or empty side, a copied
source). Per language pair it prints, each as seconds, pairs/s and MB/s of input: ingestion
(the ``fetch`` step of a ``local`` data entry through the default input policy, with its cold
content fingerprint apart), the ``clean`` step and the ``normalize`` step (NFKC + whitespace)
with 1 and 2 workers; a bare Python loop over the two files; whole ``mtcore run`` processes
(fetch + clean) on one core (``taskset -c 0``, one worker) and with two workers, beside
OpusFilter on one core; the keep/drop agreement; and where the clean step's time goes (the
chain run part by part in one process, each part as seconds and as a multiple of the bare
loop).

    .venv/bin/python bench/clean_speed.py --corpus news [--pairs 1000000] [--pair zh-en|cs-en]
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

import numpy as np
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
    from mtcore.contracts.stats import Stats
    from mtcore.data.corpus import InputPolicy
    from mtcore.text.chars import INNER_BREAKS
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


def write_corpus(
    folder: Path,
    pairs: list[tuple[str, str]],
    repeat: int,
    langs: tuple[str, ...] = ("en", "ja"),
) -> dict[str, Path]:
    from mtcore.contracts.step import write_artifact_meta

    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for side, lang in enumerate(langs):
        blob = "".join(p[side] + "\n" for p in pairs).encode("utf-8")
        files[lang] = folder / f"corpus.{lang}"
        with open(files[lang], "wb") as handle:
            for _ in range(repeat):
                handle.write(blob)
    write_artifact_meta(folder, type="parallel", langs=list(langs), name="corpus")
    return files


def run_opusfilter(
    files: dict[str, Path], work: Path, prefix: tuple[str, ...] = ()
) -> tuple[float, Path]:
    """OpusFilter's whole process on ``files`` (``prefix``: e.g. ``taskset -c 0``); its
    outputs are ``out.<lang>`` in the returned folder."""
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
                    "inputs": [str(path) for path in files.values()],
                    "outputs": [f"out.{lang}" for lang in files],
                    "filters": OPUSFILTER_CHAIN,
                },
            }
        ],
    }
    path = work / "opusfilter.yaml"
    path.write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    subprocess.run(
        [*prefix, str(command), str(path)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start, out


def run_mtcore(
    corpus: Path, work: Path, executor: Any, shard_size: int = 20_000
) -> tuple[float, Path]:
    from mtcore.contracts.step import Artifact
    from mtcore_plugins.steps.clean import CleanStep

    step = CleanStep.from_dict({"filters": MTCORE_CHAIN, "shard_size": shard_size})
    return timed_step(step, work, {"corpus": Artifact.open(corpus)}, executor), work / "corpus"


def run_normalize(corpus: Path, work: Path, executor: Any) -> float:
    """Seconds of the ``normalize`` step (NFKC + whitespace, the usual first rewrite)."""
    from mtcore.contracts.step import Artifact
    from mtcore_plugins.steps.normalize import NormalizeStep

    step = NormalizeStep.from_dict({"processors": ["unicode", "whitespace"]})
    return timed_step(step, work, {"corpus": Artifact.open(corpus)}, executor)


def timed_step(step: Any, work: Path, inputs: dict[str, Any], executor: Any) -> float:
    """Seconds ``step.run`` takes in a context of its own (the registry loaded before)."""
    from mtcore.contracts.registry import load_registry
    from mtcore.contracts.step import StepContext

    ctx = StepContext(
        step_id=step.name,
        kind=step.name,
        step_hash="bench",
        work=work,
        inputs=inputs,
        executor=executor,
        registry=load_registry(),
        show_progress=False,
    )
    start = time.perf_counter()
    step.run(ctx)
    return time.perf_counter() - start


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

    source = list(zip(*(lines(inputs[lang]) for lang in inputs), strict=True))
    kept = list(zip(*(lines(outputs[lang]) for lang in inputs), strict=True))
    mask, j = [], 0
    for pair in source:
        hit = j < len(kept) and kept[j] == pair
        mask.append(hit)
        j += hit
    if j != len(kept):
        raise SystemExit("output is not a subsequence of the input")
    return mask


NEWS_PAIRS = {"zh-en": ("zh", "en"), "cs-en": ("cs", "en")}


def write_plain(
    folder: Path, langs: tuple[str, ...], pairs: list[tuple[str, str]]
) -> dict[str, Path]:
    """The pairs as a user has them: one plain UTF-8 file per language, ``raw.<lang>``."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for side, lang in enumerate(langs):
        files[lang] = folder / f"raw.{lang}"
        files[lang].write_bytes("".join(p[side] + "\n" for p in pairs).encode("utf-8"))
    return files


def rate(label: str, seconds: float, pairs: int, size: int) -> str:
    return (
        f"{label}: {seconds:.2f} s, {pairs / seconds:,.0f} pairs/s, "
        f"{size / seconds / 1e6:,.0f} MB/s"
    )


def run_fetch(files: dict[str, Path], work: Path, executor: Any) -> tuple[float, Path]:
    """The fetch step of a ``local`` data entry over ``files``, default input policy."""
    from mtcore_plugins.steps.fetch import FetchStep

    config = {"files": {lang: str(path) for lang, path in files.items()}}
    step = FetchStep.from_dict({"source": "local", "config": config})
    return timed_step(step, work, {}, executor), work / "corpus"


def bare_loop(files: dict[str, Path]) -> float:
    """A Python loop that reads the files' lines in pairs and does nothing with them."""
    start = time.perf_counter()
    a, b = files.values()
    with open(a, encoding="utf-8") as x, open(b, encoding="utf-8") as y:
        for _pair in zip(x, y, strict=True):
            pass
    return time.perf_counter() - start


def whole_run(
    files: dict[str, Path], work: Path, workers: int, prefix: tuple[str, ...] = ()
) -> tuple[float, Path]:
    """``mtcore run`` of a recipe with one data entry and one clean step, in a fresh workdir
    and a fresh file-hash memory (a first run: the fingerprint reads the files)."""
    recipe = {
        "name": "bench",
        "executor": {"workers": workers},
        "data": {"raw": {"source": "local", "files": {k: str(v) for k, v in files.items()}}},
        "steps": {"clean": {"kind": "clean", "inputs": {"corpus": "raw"}, "filters": MTCORE_CHAIN}},
    }
    work.mkdir(parents=True)
    path = work / "bench.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    env = {**os.environ, "MTCORE_CACHE": str(work / "cache")}
    command = [*prefix, str(ROOT / ".venv" / "bin" / "mtcore"), "run", str(path)]
    start = time.perf_counter()
    subprocess.run([*command, "-w", str(work / "w"), "-q"], check=True, env=env)
    seconds = time.perf_counter() - start
    (out,) = (work / "w" / "steps").glob("clean-*/corpus")
    return seconds, out


def profile_chain(corpus: Path, langs: tuple[str, str], loop: float) -> None:
    """The clean step's work done in this process, one part at a time, as a table of seconds
    and of multiples of the bare loop: cutting shards, the decoding pass, each filter on the
    pairs still alive, and cutting out the kept lines (no worker, no files written)."""
    from mtcore.chain.filtering import KEPT, Chain, _score, make_specs
    from mtcore.contracts.registry import load_registry
    from mtcore.text.block import BlockReader

    chain = Chain(make_specs(MTCORE_CHAIN), load_registry(), langs)
    names = [entry["name"] for entry in MTCORE_CHAIN]
    parts = dict.fromkeys(["cut shards", "decode + fused counts", *names, "kept lines"], 0.0)
    paths = [corpus / f"corpus.{lang}" for lang in langs]
    for rep in range(2):  # the first pass compiles and warms the page cache
        seconds = dict.fromkeys(parts, 0.0)
        reader = iter(BlockReader(paths, 20_000))
        while True:
            start = time.perf_counter()
            raw = next(reader, None)
            seconds["cut shards"] += time.perf_counter() - start
            if raw is None:
                break
            start = time.perf_counter()
            block = raw.decode(langs, chain.classes)
            seconds["decode + fused counts"] += time.perf_counter() - start
            verdict = np.full(len(block), KEPT, dtype=np.int16)
            alive = np.arange(len(block))
            for index, (name, plugin) in enumerate(zip(names, chain.filters, strict=True)):
                start = time.perf_counter()
                ok = np.asarray(plugin.accept_block(_score(plugin, block, alive)), dtype=bool)
                verdict[alive[~ok]] = index
                alive = alive[ok]
                seconds[name] += time.perf_counter() - start
            start = time.perf_counter()
            for side in range(len(langs)):
                raw.kept_bytes(side, verdict == KEPT)
            seconds["kept lines"] += time.perf_counter() - start
        parts = seconds if rep else parts
    total = sum(parts.values())
    print(f"where the clean step's time goes (one process, {total:.2f} s in all):")
    for part, value in parts.items():
        print(f"  {part:28} {value:6.2f} s  {value / loop:5.2f}x the bare loop")


def news_bench(pair: str, target: int, skip_opusfilter: bool) -> None:
    from _cleaning_data import news_corpus

    from mtcore.data.corpus import InputPolicy
    from mtcore.data.ingest import Block, check_block
    from mtcore.recipe.hashing import hash_file
    from mtcore_plugins.executors.local import LocalExecutor

    langs = NEWS_PAIRS[pair]
    pairs, pool = news_corpus(*langs, target)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = write_plain(work / "input", langs, pairs)
        size = sum(path.stat().st_size for path in files.values())
        total = len(pairs)
        print(
            f"\n== {pair}: {total:,} pairs from {pool:,} WMT21-23 source/system-output pairs, "
            f"{size / 1e6:,.0f} MB"
        )
        start = time.perf_counter()
        for path in files.values():
            hash_file(path)
        print(rate("content fingerprint (sha256, cold; once per file version)",
                   time.perf_counter() - start, total, size))  # fmt: skip
        fetched: dict[int, Path] = {}
        cleaned: dict[int, tuple[float, Path]] = {}
        for workers in (1, 2):
            executor = LocalExecutor.from_dict({"workers": workers})
            try:
                # start the workers, import and load the compiled kernels first (a one-off
                # cost per run, about a second, excluded from the rates)
                start = time.perf_counter()
                warm = write_corpus(work / f"warm-in-{workers}", pairs[:1000], 1, langs)
                run_mtcore(warm[langs[0]].parent, work / f"warm-{workers}", executor, 100)
                run_normalize(warm[langs[0]].parent, work / f"warm-n-{workers}", executor)
                tiny = Block(("-",) * len(langs), 1, 1, (), (b"x\n",) * len(langs))
                list(executor.map(check_block, [(tiny, InputPolicy())] * 2 * workers))
                print(f"{workers} worker(s) started in {time.perf_counter() - start:.1f} s")
                seconds, fetched[workers] = run_fetch(files, work / f"fetch-{workers}", executor)
                print(rate(f"ingestion (fetch step), {workers} worker(s)", seconds, total, size))
                cleaned[workers] = run_mtcore(fetched[workers], work / f"clean-{workers}", executor)
                print(rate(f"clean step, {workers} worker(s)", cleaned[workers][0], total, size))
                seconds = run_normalize(fetched[workers], work / f"norm-{workers}", executor)
                print(rate(f"normalize step (NFKC, whitespace), {workers} worker(s)", seconds,
                           total, size))  # fmt: skip
            finally:
                executor.close()
        same = all(
            (fetched[1] / f"corpus.{lang}").read_bytes()
            == (fetched[2] / f"corpus.{lang}").read_bytes()
            for lang in langs
        )
        print(f"ingestion with 1 and 2 workers identical: {same}")
        loop = bare_loop(files)
        print(rate("bare Python loop over the two files", loop, total, size))
        one = cleaned[1][0]
        print(f"clean step (1 worker) / bare loop: {one / loop:.1f}x")
        profile_chain(fetched[1], langs, loop)
        whole1, out1 = whole_run(files, work / "run-1", 1, ("taskset", "-c", "0"))
        print(rate("mtcore run (fetch + clean), 1 core, 1 worker", whole1, total, size))
        whole2, _ = whole_run(files, work / "run-2", 2)
        print(rate("mtcore run (fetch + clean), 2 workers", whole2, total, size))
        if skip_opusfilter:
            return
        peer, peer_out = run_opusfilter(files, work, ("taskset", "-c", "0"))
        print(rate("OpusFilter 3.3.1 whole process, 1 core", peer, total, size))
        print(f"OpusFilter (1 core) / mtcore clean step (1 worker): {peer / one:.1f}x")
        print(f"OpusFilter (1 core) / mtcore run (1 core): {peer / whole1:.1f}x")
        ours = kept_mask(files, {lang: out1 / f"corpus.{lang}" for lang in files})
        theirs = kept_mask(files, {lang: peer_out / f"out.{lang}" for lang in files})
        agree = sum(a == b for a, b in zip(ours, theirs, strict=True))
        print(
            f"keep/drop agreement with OpusFilter: {agree}/{len(ours)} "
            f"({100 * agree / len(ours):.3f} %); kept: mtcore {sum(ours)}, OpusFilter {sum(theirs)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--skip-opusfilter", action="store_true")
    parser.add_argument("--corpus", choices=("small", "news"), default="small")
    parser.add_argument("--pairs", type=int, default=1_000_000, help="with --corpus news")
    parser.add_argument("--pair", choices=sorted(NEWS_PAIRS), help="with --corpus news")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.corpus == "news":
        for pair in [args.pair] if args.pair else list(NEWS_PAIRS):
            news_bench(pair, args.pairs, args.skip_opusfilter)
        return
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
