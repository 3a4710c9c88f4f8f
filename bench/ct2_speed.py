"""Decoding throughput of the translate step's two backends on CPU (issue 25): fairseq's beam
search against CTranslate2 in float32 and int8, on one checkpoint and the same sentences,
measured in one run, with the outputs compared.

Trains a ``transformer`` (fairseq's transformer_base: d 512, FFN 2048, 8 heads, 6+6 layers;
or ``--arch``) for ``--updates`` updates on small_parallel_enja through the spm, binarize and
train steps, converts it once (the cached conversion the step uses), then translates the
first ``--lines`` English test sentences with beam 1 and beam 5 at two batch sizes. Each
figure times ``translate`` of the backend's translator (SentencePiece encoding, batching,
search, decoding; loading excluded) after one untimed batch, in a child process per backend
whose peak resident memory is reported too; all on ``--threads`` threads. ``same`` is the
share of lines whose output equals fairseq's, ``BLEU`` the corpus BLEU (sacrebleu, character
tokenization) of each backend's output against the references. A model trained for a
few hundred CPU updates is far from converged: its outputs are poor and often run to the
``a*src+b`` cap, so the figures measure decoding cost at that output length (``len``).

    OMP_NUM_THREADS=2 .venv/bin/python bench/ct2_speed.py [--updates 150] [--lines 300]
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

from _steps import build_model, context

BACKENDS = [("fairseq", "default"), ("ctranslate2", "float32"), ("ctranslate2", "int8")]
SEARCHES = [(1, 32), (5, 16), (5, 64)]  # (beam, batch size)


def measure(spec_json: str) -> None:
    """Child process: one backend, every search; prints JSON (speeds, outputs, peak RSS)."""
    spec = json.loads(spec_json)
    work, backend, compute = Path(spec["work"]), spec["backend"], spec["compute_type"]
    lines = (work / "lines.txt").read_text(encoding="utf-8").split("\n")[:-1]
    results = []
    for beam, batch in SEARCHES:
        translator = load(work, backend, compute, beam, batch, spec["threads"])
        translator.translate(lines[:batch])  # warm-up, untimed
        started = time.perf_counter()
        outputs = translator.translate(lines)
        seconds = time.perf_counter() - started
        assert len(outputs) == len(lines)
        results.append({"beam": beam, "batch": batch, "sps": len(lines) / seconds, "out": outputs})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"results": results, "peak_mib": peak}))


def load(work: Path, backend: str, compute: str, beam: int, batch: int, threads: int) -> object:
    import torch

    from mtcore.step import Artifact
    from mtcore_plugins.steps.ct2_convert import converted
    from mtcore_plugins.steps.ct2_decoding import Ct2Translator
    from mtcore_plugins.steps.translate import TranslateConfig, Translator

    torch.set_num_threads(threads)
    config = TranslateConfig(
        src="en", tgt="ja", beam=beam, batch_size=batch, backend=backend, compute_type=compute
    )
    ctx = context(work, "translate", model=work / "train" / "model", spm=work / "spm" / "model")
    if backend == "fairseq":
        return Translator(config, ctx)
    path = converted(Artifact.open(work / "train" / "model"), "en", "ja", config.models)
    return Ct2Translator(config, ctx, path, threads)


def run_child(work: Path, backend: str, compute: str, threads: int) -> dict[str, object]:
    spec = {"work": str(work), "backend": backend, "compute_type": compute, "threads": threads}
    done = subprocess.run(
        [sys.executable, __file__, "--measure", json.dumps(spec)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"measuring {backend}/{compute} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=150)
    parser.add_argument("--arch", default="transformer")
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.measure:
        return measure(options.measure)
    import sacrebleu
    from _steps import DATA

    work = options.work or Path(tempfile.mkdtemp(prefix="ct2-speed-"))
    if not (work / "train" / "model" / "checkpoint.pt").exists():
        started = time.time()
        build_model(
            work, options.updates, options.arch, options.threads,
            pairs=20000, max_tokens=4096, lr=0.001, share_all_embeddings=True,
        )  # fmt: skip
        print(
            f"trained {options.arch} for {options.updates} updates in {time.time() - started:.0f}s"
        )
    lines = (DATA / "test.en").read_text(encoding="utf-8").splitlines()[: options.lines]
    refs = (DATA / "test.ja").read_text(encoding="utf-8").splitlines()[: options.lines]
    (work / "lines.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    found = {f"{b}/{c}": run_child(work, b, c, options.threads) for b, c in BACKENDS}
    base = found["fairseq/default"]
    print(f"{options.arch}, {options.updates} updates, {len(lines)} test sentences, "
          f"{options.threads} threads; sentences/s (ratio to fairseq), same = output equal to "
          "fairseq's, BLEU (char) against the references")  # fmt: skip
    for name, result in found.items():
        print(f"{name:22s} peak RSS {result['peak_mib']:.0f} MiB")
        for row, ref_row in zip(result["results"], base["results"], strict=True):  # type: ignore[arg-type]
            same = sum(a == b for a, b in zip(row["out"], ref_row["out"], strict=True))
            bleu = sacrebleu.corpus_bleu(row["out"], [refs], tokenize="char").score
            length = sum(len(o) for o in row["out"]) / len(lines)
            print(
                f"  beam {row['beam']} batch {row['batch']:3d}: {row['sps']:8.1f} sent/s "
                f"({row['sps'] / ref_row['sps']:.2f}x)  same {same / len(lines):.1%}  "
                f"BLEU {bleu:.2f}  len {length:.1f} chars"
            )


if __name__ == "__main__":
    main()
