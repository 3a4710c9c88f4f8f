"""Translation throughput (sentences/s) of a tiny model on CPU: the translate step's in-process
translator against fairseq-generate on the same checkpoint, sentences and settings, in one run.

Trains a ``mtcore_transformer_tiny`` model for a few dozen updates on small_parallel_enja
(SentencePiece, binarize and train steps, as a recipe would), then translates real English
sentences (the test split) into Japanese with beam 1 and beam 5 at two batch sizes.

mtcore's figure times ``Translator.translate`` (SentencePiece encoding, length-sorted batches,
beam search, decoding), model loading excluded: in a fresh process ("cold": the first call's
costs included, as in fairseq-generate's figure) and after one untimed batch ("warm", what a
long translate step sees). fairseq-generate's is its own "Translated N sentences ... (X
sentences/s)" line: generation on pre-binarized data in a fresh process, loading excluded.
Each figure is the best of ``--rounds`` runs, the three alternating (on a shared machine a
burst of load slows one run, not all). All use the same torch thread count, max_len_a 1.5,
max_len_b 10 and lenpen 1. ``len`` is fairseq-generate's mean output length in tokens per
sentence (EOS included): the speed depends on it, and an undertrained model may run to the
length limit.

    OMP_NUM_THREADS=2 .venv/bin/python bench/translate_speed.py [--updates 40] [--work DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _steps import DATA, ROOT, build_model, context

USER_DIR = ROOT / "plugins/models/user_dir/mtcore_fairseq"
TRANSLATED = re.compile(
    r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in .*?\(([\d.]+) sentences/s"
)


def mtcore_speed(
    work: Path, model: Path, spm: Path, lines: list[str], beam: int, batch: int, warm: bool
) -> float:
    """Sentences/s of ``Translator.translate`` over ``lines``; ``warm`` translates one batch
    first, untimed (first-call costs are then left out, as in a long translate step)."""
    from mtcore_plugins.steps.translate import TranslateConfig, Translator

    config = TranslateConfig(src="en", tgt="ja", beam=beam, batch_size=batch)
    translator = Translator(config, context(work, "translate", model=model, spm=spm))
    if warm:
        translator.translate(lines[:batch])
    started = time.perf_counter()
    outputs = translator.translate(lines)
    seconds = time.perf_counter() - started
    assert len(outputs) == len(lines)
    return len(lines) / seconds


def mtcore_cold_speed(work: Path, model: Path, spm: Path, beam: int, batch: int) -> float:
    """``mtcore_speed`` without warm-up in a fresh process, as fairseq-generate is measured:
    both then pay the first-call costs of the process (allocations, lazy initialisation)."""
    spec = {"work": str(work), "model": str(model), "spm": str(spm), "beam": beam}
    spec["batch"] = batch
    cmd = [sys.executable, __file__, "--measure", json.dumps(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"measuring mtcore failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def measure(spec_json: str) -> None:
    """The child process of :func:`mtcore_cold_speed`."""
    spec = json.loads(spec_json)
    work = Path(spec["work"])
    lines = (work / "lines.txt").read_text(encoding="utf-8").split("\n")[:-1]
    model, spm = Path(spec["model"]), Path(spec["spm"])
    print(mtcore_speed(work, model, spm, lines, spec["beam"], spec["batch"], warm=False))


def binarize_test(work: Path, model: Path, spm: Path, lines: list[str], refs: list[str]) -> Path:
    """The sentences encoded with the model's SentencePiece and dictionaries, for
    fairseq-generate."""
    from mtcore_plugins.common.text.spm import load_spm

    processor = load_spm(spm)
    encoded = work / "encoded"
    encoded.mkdir(parents=True, exist_ok=True)
    for lang, texts in (("en", lines), ("ja", refs)):
        pieces = processor.encode(texts, out_type=str)
        (encoded / f"test.{lang}").write_text("".join(" ".join(p) + "\n" for p in pieces))
    out = work / "generate-data"
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "-s", "en", "-t", "ja"]
    cmd += ["--srcdict", str(model / "dict.en.txt"), "--tgtdict", str(model / "dict.ja.txt")]
    cmd += ["--testpref", str(encoded / "test"), "--destdir", str(out), "--dataset-impl", "mmap"]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def fairseq_speed(
    data: Path, model: Path, beam: int, batch: int, threads: int
) -> tuple[float, float]:
    """Sentences per second, and generated tokens (EOS included) per sentence."""
    cmd = [sys.executable, "-m", "fairseq_cli.generate", str(data), "--user-dir", str(USER_DIR)]
    cmd += ["--path", str(model / "checkpoint.pt"), "--gen-subset", "test", "-s", "en"]
    cmd += ["-t", "ja", "--beam", str(beam), "--batch-size", str(batch), "--cpu"]
    cmd += ["--max-len-a", "1.5", "--max-len-b", "10", "--lenpen", "1.0", "--quiet"]
    cmd += ["--remove-bpe", "sentencepiece", "--required-batch-size-multiple", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    found = TRANSLATED.search(done.stdout + done.stderr)
    if done.returncode != 0 or not found:
        raise SystemExit(f"fairseq-generate failed:\n{(done.stdout + done.stderr)[-3000:]}")
    sentences, tokens = (int(found.group(i).replace(",", "")) for i in (1, 2))
    return float(found.group(3)), tokens / sentences


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=40, help="training updates")
    parser.add_argument("--arch", default="mtcore_transformer_tiny")
    parser.add_argument("--lines", type=int, default=300, help="sentences translated")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--batches", default="16,64")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, the best kept")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    parser.add_argument("--work", type=Path, help="keep the model here and reuse it next time")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    import torch

    torch.set_num_threads(options.threads)
    if options.measure:
        measure(options.measure)
        return
    if not DATA.exists():
        raise SystemExit(f"real data not found at {DATA}")
    with tempfile.TemporaryDirectory(prefix="translate-speed-") as tmp:
        run(options, options.work or Path(tmp))


def run(options: argparse.Namespace, work: Path) -> None:
    with open(DATA / "test.en", encoding="utf-8") as en, open(DATA / "test.ja") as ja:
        lines = [line.rstrip("\n") for line in itertools.islice(en, options.lines)]
        refs = [line.rstrip("\n") for line in itertools.islice(ja, options.lines)]
    work.mkdir(parents=True, exist_ok=True)
    (work / "lines.txt").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    model, spm = work / "train" / "model", work / "spm" / "model"
    if not (model / "checkpoint.pt").exists():
        started = time.time()
        build_model(work, options.updates, options.arch, options.threads)
        seconds = time.time() - started
        print(f"trained {options.arch} for {options.updates} updates in {seconds:.0f}s", flush=True)
    data = binarize_test(work, model, spm, lines, refs)
    print(f"{len(lines)} sentences of small_parallel_enja test.en -> ja, CPU, "
          f"{options.threads} threads, best of {options.rounds}")  # fmt: skip
    print("beam batch  mtcore cold  mtcore warm  fairseq-generate  cold/fairseq   len")
    for beam in (int(b) for b in options.beams.split(",")):
        for batch in (int(b) for b in options.batches.split(",")):
            cold, warm, theirs, length = 0.0, 0.0, 0.0, 0.0
            for _ in range(options.rounds):  # the best of each: load bursts slow single runs
                cold = max(cold, mtcore_cold_speed(work, model, spm, beam, batch))
                warm = max(warm, mtcore_speed(work, model, spm, lines, beam, batch, warm=True))
                speed, length = fairseq_speed(data, model, beam, batch, options.threads)
                theirs = max(theirs, speed)
            row = f"{beam:>4} {batch:>5} {cold:>12.1f} {warm:>12.1f} {theirs:>17.1f}"
            print(f"{row} {cold / theirs:>13.2f} {length:>5.1f}", flush=True)


if __name__ == "__main__":
    main()
