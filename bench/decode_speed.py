"""Decoding and reranking speed: n-best generation and force decoding with an ensemble of two
tiny models against fairseq-generate on the same models, sentences and settings, in one run; and
MERT on a 1,000-sentence x 10-best dev set.

Trains two ``mtcore_transformer_tiny`` models (seeds 1 and 2, one SentencePiece model and
dictionary) on small_parallel_enja, then on its real test sentences (English -> Japanese):

- n-best generation: the translate step's ``Translator.translate_nbest`` (beam 10, 10-best,
  equal-weight ensemble) against ``fairseq-generate --path a.pt:b.pt --beam 10 --nbest 10``;
- force decoding: the rerank scorers' ``ForceDecoder`` on every (source, hypothesis) pair of
  that n-best against ``fairseq-generate --score-reference`` on the same pairs binarized.

mtcore's figures time the calls (SentencePiece in and out included, model loading excluded);
fairseq's are its own "Translated N sentences ... (X sentences/s)" line, which times generation
on pre-binarized data, loading excluded. Both run with the same torch threads and batch size,
``--rounds`` times alternately (load from other processes hits both alike); the best round of
each is reported. MERT: ``MertTuner.fit`` (defaults: 20 restarts) on 1,000 real sentences with
10 variants each and four features, timed whole (BLEU statistics included).

    OMP_NUM_THREADS=2 .venv/bin/python bench/decode_speed.py [--work DIR] [--lines 500]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _steps import DATA, ROOT, context, corpus

USER_DIR = ROOT / "plugins/models/user_dir/mtcore_fairseq"
TRANSLATED = re.compile(r"Translated ([\d,]+) sentences .* \(([\d.]+) sentences/s")
BEAM = 10


def build_models(work: Path, updates: int, threads: int) -> tuple[list[Path], Path]:
    """Two trained tiny models sharing one SentencePiece model and dictionary (reused when
    ``work`` already holds them)."""
    from mtcore_plugins.steps.binarize import BinarizeStep
    from mtcore_plugins.steps.spm import SentencePieceStep
    from mtcore_plugins.steps.train import TrainStep

    spm, models = work / "spm" / "model", [work / f"train{s}" / "model" for s in (1, 2)]
    if all((m / "checkpoint.pt").exists() for m in models):
        return models, spm
    train, valid = corpus(work / "train", "train", 5000), corpus(work / "valid", "dev", 100)
    SentencePieceStep.from_dict({"vocab_size": 4000, "num_threads": threads}).run(
        context(work, "spm", corpus=train)
    )
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(
        context(work, "binarize", train=train, valid=valid, spm=spm)
    )
    for seed in (1, 2):
        settings = {
            "arch": "mtcore_transformer_tiny", "max_update": updates, "max_tokens": 4096,
            "lr": 0.003, "warmup_updates": max(1, updates // 4), "dropout": 0.1, "seed": seed,
            "save_interval_updates": updates, "keep_last": 1, "average_last": 1,
            "threads": threads,
        }  # fmt: skip
        TrainStep.from_dict(settings).run(
            context(work, f"train{seed}", data=work / "binarize" / "data")
        )
    return models, spm


def translator(work: Path, models: list[Path], spm: Path, batch: int) -> Any:
    from mtcore_plugins.steps.translate import TranslateConfig, Translator

    config = TranslateConfig(src="en", tgt="ja", beam=BEAM, nbest=BEAM, batch_size=batch)
    inputs = {"model": models[0], "model2": models[1], "spm": spm}
    return Translator(config, context(work, "translate", **inputs))


def binarize(work: Path, name: str, model: Path, spm: Any, sources: list[str], targets: list[str]):
    """Sentence pairs as fairseq test data with the models' dictionaries."""
    encoded = work / f"{name}-text"
    encoded.mkdir(parents=True, exist_ok=True)
    for lang, texts in (("en", sources), ("ja", targets)):
        pieces = spm.encode(texts, out_type=str)
        (encoded / f"test.{lang}").write_text("".join(" ".join(p) + "\n" for p in pieces))
    out = work / name
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "-s", "en", "-t", "ja"]
    cmd += ["--srcdict", str(model / "dict.en.txt"), "--tgtdict", str(model / "dict.ja.txt")]
    cmd += ["--testpref", str(encoded / "test"), "--destdir", str(out), "--dataset-impl", "mmap"]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def fairseq_generate(data: Path, models: list[Path], batch: int, threads: int, *extra: str):
    """fairseq-generate's own sentences/s."""
    cmd = [sys.executable, "-m", "fairseq_cli.generate", str(data), "--user-dir", str(USER_DIR)]
    cmd += ["--path", ":".join(str(m / "checkpoint.pt") for m in models), "--gen-subset", "test"]
    cmd += ["-s", "en", "-t", "ja", "--beam", str(BEAM), "--nbest", str(BEAM), "--cpu"]
    cmd += ["--batch-size", str(batch), "--max-len-a", "1.5", "--max-len-b", "10", "--quiet"]
    cmd += ["--required-batch-size-multiple", "1", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    found = TRANSLATED.search(done.stdout + done.stderr)
    if done.returncode != 0 or not found:
        raise SystemExit(f"fairseq-generate failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return float(found.group(2))


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def mert_seconds(lines: int, seed: int = 0) -> tuple[float, float, dict[str, float]]:
    """(seconds, dev BLEU, weights) of MERT on ``lines`` real sentences x 10 variants."""
    import numpy as np

    from mtcore_plugins.tuners.mert import MertTuner
    from mtcore_plugins.tuners.random_search import RandomSearchTuner

    with open(DATA / "train.en", encoding="utf-8") as handle:
        refs = [line.rstrip("\n") for line in itertools.islice(handle, lines)]
    rng = random.Random(seed)
    nbest = []
    noise = np.random.default_rng(seed)
    truth = np.array([0.9, 0.2, 0.6, 0.4])
    for ref in refs:
        words = ref.split()
        hyps = []
        for k in range(10):  # the reference with k edits: quality falls with k
            w = list(words)
            for _ in range(k):
                if len(w) > 1 and rng.random() < 0.5:
                    del w[rng.randrange(len(w))]
                else:
                    w.insert(rng.randrange(len(w) + 1), rng.choice(["the", "a", "is"]))
            f = noise.standard_normal(4)
            f += (0.5 * (10 - k) / 10 - f @ truth) * truth / (truth @ truth)
            hyps.append((" ".join(w), dict(zip("abcd", f.tolist(), strict=True))))
        rng.shuffle(hyps)
        nbest.append(hyps)
    MertTuner.from_dict({"restarts": 1, "iterations": 1}).fit("abcd", nbest[:20], [refs[:20]], "en")
    tuner = MertTuner.from_dict({})  # compiled above: the figure is the fit, not numba's JIT
    seconds, weights = timed(tuner.fit, list("abcd"), nbest, [refs], "en")
    baseline = RandomSearchTuner.from_dict({})
    baseline.fit(list("abcd"), nbest, [refs], "en")
    print(f"  random search (1,000 trials) on the same set: dev BLEU {baseline.bleu:.2f}")
    return seconds, float(tuner.bleu), weights


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="keep/reuse models here")
    parser.add_argument("--updates", type=int, default=60, help="training updates per model")
    parser.add_argument("--lines", type=int, default=500, help="test sentences")
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--rounds", type=int, default=2, help="alternating timed rounds")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    options = parser.parse_args(argv)
    if not DATA.exists():
        raise SystemExit(f"real data not found at {DATA}")
    import torch

    torch.set_num_threads(options.threads)
    with open(DATA / "test.en", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in itertools.islice(handle, options.lines)]
    with tempfile.TemporaryDirectory(prefix="decode-speed-") as tmp:
        work = options.work or Path(tmp)
        models, spm = build_models(work, options.updates, options.threads)
        ours = translator(work, models, spm, options.batch)
        ours.translate_nbest(lines[: options.batch], BEAM)  # warm-up
        _, lists = timed(ours.translate_nbest, lines, BEAM)
        sources = [line for line, hyps in zip(lines, lists, strict=True) for _ in hyps]
        targets = [text for hyps in lists for text, _ in hyps]
        test = binarize(work, "test-bin", models[0], ours.spm, lines, [""] * len(lines))
        pairs = binarize(work, "pairs-bin", models[0], ours.spm, sources, targets)
        from mtcore_plugins.common.decoding.force import ForceDecoder
        from mtcore_plugins.common.decoding.translator import Ensemble

        ensemble = Ensemble(
            ours.models, ours.src_dict, ours.tgt_dict, ours.spm, "l2r", ours.max_source, None
        )
        scorer = ForceDecoder(ensemble, max_tokens=4096)
        best = {"ours_nbest": 0.0, "theirs_nbest": 0.0, "ours_force": 0.0, "theirs_force": 0.0}
        for _ in range(options.rounds):
            seconds, _ = timed(ours.translate_nbest, lines, BEAM)
            best["ours_nbest"] = max(best["ours_nbest"], len(lines) / seconds)
            theirs = fairseq_generate(test, models, options.batch, options.threads)
            best["theirs_nbest"] = max(best["theirs_nbest"], theirs)
            seconds, _ = timed(scorer.score, sources, targets)
            best["ours_force"] = max(best["ours_force"], len(sources) / seconds)
            theirs = fairseq_generate(
                pairs, models, options.batch, options.threads, "--score-reference"
            )
            best["theirs_force"] = max(best["theirs_force"], theirs)
        print(f"{len(lines)} small_parallel_enja test sentences en->ja, ensemble of two "
              f"mtcore_transformer_tiny, CPU, {options.threads} threads, batch {options.batch}, "
              f"best of {options.rounds} rounds")  # fmt: skip
        for label, key, unit in (
            (f"n-best generation (beam {BEAM}, {BEAM}-best)", "nbest", "sentences/s"),
            (f"force decoding ({len(sources)} pairs)", "force", "pairs/s"),
        ):
            a, b = best[f"ours_{key}"], best[f"theirs_{key}"]
            print(f"  {label}: mtcore {a:.1f} {unit}, fairseq-generate {b:.1f}, ratio {a / b:.2f}x")
    seconds, bleu, weights = mert_seconds(1000)
    print(f"  MERT, 1,000 sentences x 10-best, 4 features: {seconds:.2f}s (dev BLEU {bleu:.2f})")


if __name__ == "__main__":
    main()
