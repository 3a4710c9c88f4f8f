"""Throughput of the neural metrics (COMET, CometKiwi, MetricX-24) on real WMT22 en-ja system
outputs, against unbabel-comet's own ``model.predict`` on the same models and inputs, in one run.

The models are random, built offline as tests/support/tiny_comet.py and
tests/support/tiny_metricx.py build theirs but larger, so that the encoder dominates the time as in
a released model:

- COMET (``regression_metric``, as wmt22-comet-da; estimator [256]) and CometKiwi
  (``unified_metric`` over ``[mt, src]``, as wmt22-cometkiwi-da) share an XLM-R encoder of hidden
  size 256, 4 layers, 4 heads, FFN 1024: 3.2M weights in its layers, 2.2M in its embeddings,
  over a unigram SentencePiece vocabulary (8,002 pieces) learnt on the first ``TRAIN_LINES``
  lines of the test set (English source, reference A, every system's output); about 33 tokens
  a segment. The scored lines come after those.
- MetricX-24: an mT5 (``MT5ForRegression``) of d_model 256, d_kv 64, d_ff 1024, 4 encoder and
  4 decoder layers, 4 heads, with mT5's 250,112-entry vocabulary (untied input and output
  embeddings: 128M of its 138M weights, 525 MiB in fp32) over a SentencePiece model learnt on
  the same lines; its regression row is fitted so that scores spread over [0, 25].

Sections (``--only`` picks some):

1. ``comet``: ``--systems`` systems x ``--segments`` segments against the same sources and
   reference A. mtcore: one ``corpus_score`` call per system (as the evaluate step makes them;
   the sources and references are embedded once for all systems), and one ``segment_scores``
   call over all the systems together; comet: ``model.predict(data, batch_size, gpus=0)`` per
   system.
2. ``mbr``: ``--mbr-sentences`` sources x ``--candidates`` real candidates (the WMT22 systems'
   outputs, then reference A), each against all of them as pseudo-references: mtcore's one
   ``segment_scores`` call on the flattened M x M triples (as an MBR shard makes it) against
   comet's ``predict`` on the same triples.
3. ``kiwi``: CometKiwi on ``--kiwi-systems`` systems: mtcore's ``corpus_score`` per system
   against comet's ``predict`` per system. A joint encoding of (mt, src) cannot be shared; only
   identical inputs (systems that output the same sentence) are scored once: expect about 1x.
4. ``metricx``: mtcore's ``metricx`` metric on ``--metricx-segments`` segments of one system at
   batch size 1 and 16, in a fresh process, and that process's peak RSS (``getrusage``). It is
   measured first, while the bench process is small: a spawned child's ``ru_maxrss`` starts at
   its parent's RSS at the fork.

Figures are wall time of the scoring calls (loading and a warm-up call excluded; comet's is its
whole ``predict`` call, Lightning trainer set-up included, as a user pays it), the best of
``--rounds`` rounds. The implementations take turns call by call (system by system), who goes
first alternating, so that load from other processes on a shared machine hits each alike; still,
on two busy cores one round moves a ratio by tens of percent: use ``--rounds 3`` for a firmer
figure. Both use the same batch size and ``--threads`` torch threads. ``max |diff|`` is the
largest difference of the segment scores between the two: a speed-up that changed the scores
would show there. The defaults take about three minutes on two shared cores; the larger sizes
(``--segments 300 --mbr-sentences 20``) take about ten times as long, nearly all of it comet's.

    OMP_NUM_THREADS=2 .venv/bin/python bench/neural_metrics.py [--quick] [--rounds 3]
        [--only comet,mbr,kiwi,metricx] [--systems 4] [--segments 100] [--mbr-sentences 3]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import resource
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from importlib.metadata import version
from multiprocessing import get_context
from pathlib import Path
from typing import Any

WMT22 = (
    Path(__file__).resolve().parents[1].parent
    / "shared/data/en-ja/wmt-conference+wmt22-news-systems/txt"
)
SOURCE = WMT22 / "sources/generaltest2022.en-ja.src.en"
REFERENCE = WMT22 / "references/generaltest2022.en-ja.ref.A.ja"
OUTPUTS = WMT22 / "system-outputs"
SYSTEMS = ("NT5", "Online-A", "DLUT", "JDExploreAcademy", "Online-B", "LanguageX")
TRAIN_LINES = 700  # vocabularies are learnt on these lines; the bench scores later ones
SECTIONS = ("comet", "mbr", "kiwi", "metricx")
XLMR = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4}
XLMR_FFN = 1024
MT5 = {"d_model": 256, "d_kv": 64, "d_ff": 1024, "num_layers": 4, "num_heads": 4}
MT5_VOCAB = 250_112
REGRESSION_ID = 250_089
HEAD = {
    "hidden_sizes": [256],
    "dropout": 0.1,
    "nr_frozen_epochs": 0.3,
    "keep_embeddings_frozen": True,
    "encoder_model": "XLM-RoBERTa",
    "batch_size": 16,
}


# --- data ------------------------------------------------------------------------------------


def system_names() -> list[str]:
    """Every en-ja system of WMT22, the :data:`SYSTEMS` first."""
    found = sorted(p.name.split(".hyp.")[1].removesuffix(".ja") for p in OUTPUTS.glob("*.ja"))
    return [s for s in SYSTEMS if s in found] + [s for s in found if s not in SYSTEMS]


def lines(path: Path, start: int, count: int) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[start : start + count]


def output(system: str, start: int, count: int) -> list[str]:
    return lines(OUTPUTS / f"generaltest2022.en-ja.hyp.{system}.ja", start, count)


def training_text() -> list[str]:
    """Source, reference and every system output of the first :data:`TRAIN_LINES` lines."""
    text = lines(SOURCE, 0, TRAIN_LINES) + lines(REFERENCE, 0, TRAIN_LINES)
    for system in system_names():
        text += output(system, 0, TRAIN_LINES)
    return [line for line in text if line.strip()]


def train_spm(sentences: list[str], **special: int) -> bytes:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=8000,
        hard_vocab_limit=False, model_type="unigram", character_coverage=0.9995,
        minloglevel=2, **special,
    )  # fmt: skip
    return model.getvalue()


# --- models ----------------------------------------------------------------------------------


def build_comet(root: Path, text: list[str]) -> dict[str, Path]:
    """The XLM-R encoder directory and a COMET and a CometKiwi model using it, in the layout
    ``comet.download_model`` leaves (hparams.yaml + checkpoints/model.ckpt)."""
    import torch
    from comet.models import RegressionMetric, UnifiedMetric
    from transformers import XLMRobertaConfig, XLMRobertaTokenizerFast

    encoder = root / "encoder"
    encoder.mkdir(parents=True)
    pieces = root / "xlmr.spm.model"
    pieces.write_bytes(train_spm(text))
    tokenizer = XLMRobertaTokenizerFast(vocab_file=str(pieces))
    tokenizer.save_pretrained(encoder)
    XLMRobertaConfig(
        vocab_size=len(tokenizer), intermediate_size=XLMR_FFN, max_position_embeddings=514,
        type_vocab_size=1, initializer_range=0.3, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, **XLMR,
    ).save_pretrained(encoder)  # fmt: skip
    common: dict[str, Any] = dict(
        HEAD, pretrained_model=str(encoder), load_pretrained_weights=False, local_files_only=True
    )
    layers = XLMR["num_hidden_layers"]
    out = {"encoder": encoder}
    for seed, kind in enumerate(("comet", "cometkiwi")):
        torch.manual_seed(seed)
        if kind == "comet":
            model: Any = RegressionMetric(
                **common, layer="mix", layer_transformation="sparsemax", layer_norm=True,
                pool="avg",
            )  # fmt: skip
        else:
            model = UnifiedMetric(
                **common, sent_layer="mix", layer_transformation="sparsemax", layer_norm=True,
                word_layer=layers, input_segments=["mt", "src"], word_level_training=False,
            )  # fmt: skip
        with torch.no_grad():  # upper layers weigh more, as in tests/support/tiny_comet.py
            weights = model.layerwise_attention.scalar_parameters
            for i, weight in enumerate(weights):
                weight.fill_(i / (len(weights) - 1))
        out[kind] = save_comet(model.eval(), root / kind)
    return out


def save_comet(model: Any, dest: Path) -> Path:
    import pytorch_lightning
    import torch
    import yaml

    hparams = dict(model.hparams)
    hparams["class_identifier"] = model.hparams.class_identifier
    (dest / "checkpoints").mkdir(parents=True)
    (dest / "hparams.yaml").write_text(yaml.safe_dump(hparams), encoding="utf-8")
    checkpoint = {
        "epoch": 0,
        "global_step": 0,
        "pytorch-lightning_version": pytorch_lightning.__version__,
        "state_dict": model.state_dict(),
        "hparams_name": "kwargs",
        "hyper_parameters": hparams,
    }
    torch.save(checkpoint, dest / "checkpoints" / "model.ckpt")
    return dest


def build_metricx(dest: Path, text: list[str], calibration: list[str]) -> Path:
    """A MetricX-24-shaped mT5 in the layout ``fetch_model`` leaves, its regression row fitted
    (least squares) so that ``calibration`` inputs score about 12.5 +- 3."""
    import torch
    from transformers import MT5Config, MT5ForConditionalGeneration, T5TokenizerFast

    (dest / "tokenizer").mkdir(parents=True)
    (dest / "tokenizer/spiece.model").write_bytes(
        train_spm(text, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    )
    tokenizer = T5TokenizerFast.from_pretrained(str(dest / "tokenizer"), extra_ids=0, legacy=True)
    config = MT5Config(
        vocab_size=MT5_VOCAB, tie_word_embeddings=False, decoder_start_token_id=0,
        pad_token_id=0, eos_token_id=1, architectures=["MT5ForRegression"], **MT5,
    )  # fmt: skip
    torch.manual_seed(1)
    model = MT5ForConditionalGeneration(config).eval()
    states = []
    with torch.no_grad():
        model.shared.weight[0] = 0  # the decoder's one input (id 0) adds nothing constant
        for start in range(0, len(calibration), 25):
            ids = [x[:-1] for x in tokenizer(calibration[start : start + 25])["input_ids"]]
            width = max(map(len, ids))
            out = model(
                input_ids=torch.tensor([x + [0] * (width - len(x)) for x in ids]),
                attention_mask=torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
                decoder_input_ids=torch.zeros((len(ids), 1), dtype=torch.long),
                output_hidden_states=True,
            )
            states.append(out.decoder_hidden_states[-1][:, 0])
        hidden = torch.cat(states)
        generator = torch.Generator().manual_seed(0)
        targets = 12.5 + 3.0 * torch.randn(len(hidden), 1, generator=generator)
        model.get_output_embeddings().weight[REGRESSION_ID] = torch.linalg.lstsq(
            hidden, targets
        ).solution[:, 0]
    model.save_pretrained(str(dest), safe_serialization=True)
    meta = {"id": "bench/metricx-24-256x4", "revision": "r1", "metric": "metricx"}
    (dest / "mtcore-model.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
    return dest


# --- measuring -------------------------------------------------------------------------------


def quiet() -> None:
    """Lightning's, comet's and transformers' banners and warnings off ("GPU available: False",
    tips, "Encoder model frozen.", deprecations): only the bench's figures are printed."""
    warnings.simplefilter("ignore")
    import comet  # noqa: F401  (imports Lightning, whose loggers are then set up)

    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("pytorch_lightning", "lightning", "comet", "transformers")):
            logging.getLogger(name).setLevel(logging.ERROR)


Run = Callable[[], list[float]]


def race(runs: dict[str, list[Run]], rounds: int) -> dict[str, tuple[float, list[float]]]:
    """Each run's best wall time over ``rounds`` rounds, with its scores. A run is a list of
    calls (one per system, say); the runs take turns call by call, who goes first alternating,
    so that a burst of load from another process on a shared machine hits each alike."""
    best: dict[str, tuple[float, list[float]]] = {}
    steps = max(map(len, runs.values()))
    for r in range(rounds):
        seconds = dict.fromkeys(runs, 0.0)
        scores: dict[str, list[float]] = {name: [] for name in runs}
        for i in range(steps):
            for name in list(runs)[:: -1 if (r + i) % 2 else 1]:
                if i < len(runs[name]):
                    started = time.perf_counter()
                    scores[name] += runs[name][i]()
                    seconds[name] += time.perf_counter() - started
        for name in runs:
            if name not in best or seconds[name] < best[name][0]:
                best[name] = (seconds[name], scores[name])
    return best


def max_diff(a: Sequence[float], b: Sequence[float]) -> float:
    assert len(a) == len(b), (len(a), len(b))
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def row(label: str, items: int, seconds: float, extra: str = "") -> None:
    print(f"  {label:46} {items:6d} {seconds:7.2f} s {items / seconds:8.1f}/s  {extra}".rstrip())


def against(peer: tuple[float, list[float]], ours: tuple[float, list[float]]) -> str:
    """mtcore's speed as a multiple of comet's, and the largest score difference."""
    return f"x{peer[0] / ours[0]:.2f} of comet  max |diff| {max_diff(ours[1], peer[1]):.1e}"


def comet_peer(model_dir: Path, batch_size: int) -> Callable[[list[dict[str, str]]], list[float]]:
    """comet's own loader, and its ``predict`` as a user calls it on the CPU."""
    from comet import load_from_checkpoint

    model = load_from_checkpoint(str(model_dir / "checkpoints" / "model.ckpt"))

    def predict(data: list[dict[str, str]]) -> list[float]:
        result = model.predict(data, batch_size=batch_size, gpus=0, progress_bar=False)
        return [float(x) for x in result.scores]

    return predict


def open_metric(cls: Any, model: Path, options: argparse.Namespace) -> Any:
    """An mtcore metric with its model loaded (loading is not timed) and warmed up on lines
    the bench does not time (the first call also hashes the checkpoint for the signature)."""
    settings = {"model": str(model), "batch_size": options.batch_size}
    metric = cls.from_dict({**settings, "threads": options.threads, "device": "cpu"})
    metric.setup({})
    src, ref = lines(SOURCE, 0, 8), lines(REFERENCE, 0, 8)
    metric.corpus_score(ref, [ref], "ja", sources=src)
    metric.runner().cache.clear()
    return metric


def warm(peer: Callable[[list[dict[str, str]]], list[float]]) -> None:
    src, ref = lines(SOURCE, 0, 8), lines(REFERENCE, 0, 8)
    peer([{"src": s, "mt": r, "ref": r} for s, r in zip(src, ref, strict=True)])


def comet_systems(models: dict[str, Path], options: argparse.Namespace, systems: list[str]) -> None:
    from mtcore_plugins.metrics.comet import CometMetric

    n = options.segments
    src, ref = lines(SOURCE, TRAIN_LINES, n), lines(REFERENCE, TRAIN_LINES, n)
    hyps = {system: output(system, TRAIN_LINES, n) for system in systems}
    ours = open_metric(CometMetric, models["comet"], options)
    cache = ours.runner().cache
    theirs = comet_peer(models["comet"], options.batch_size)
    warm(theirs)

    def mine(system: str) -> Run:
        def run() -> list[float]:
            if system == systems[0]:
                cache.clear()  # every round embeds the sources and the references anew
            return list(
                ours.corpus_score(hyps[system], [ref], "ja", sources=src).details["segments"]
            )

        return run

    def together() -> list[float]:
        cache.clear()
        every = [h for system in systems for h in hyps[system]]
        k = len(systems)
        return list(ours.segment_scores(every, [ref * k], "ja", sources=src * k))

    def peer(system: str) -> Run:
        rows = [
            {"src": s, "mt": h, "ref": r} for s, h, r in zip(src, hyps[system], ref, strict=True)
        ]
        return lambda: theirs(rows)

    total = n * len(systems)
    distinct = len(set(src) | set(ref) | {h for system in systems for h in hyps[system]})
    print(
        f"\n1. COMET (regression_metric), {len(systems)} systems ({', '.join(systems)}) x {n} "
        f"segments: {distinct} distinct texts; comet embeds {3 * total}"
    )
    runs = {
        "peer": [peer(system) for system in systems],
        "per_system": [mine(system) for system in systems],
        "together": [together],
    }
    best = race(runs, options.rounds)
    row("comet predict, one call per system", total, best["peer"][0])
    row(
        "mtcore corpus_score, one call per system",
        total,
        best["per_system"][0],
        against(best["peer"], best["per_system"]),
    )
    row(
        "mtcore segment_scores, all systems in one call",
        total,
        best["together"][0],
        against(best["peer"], best["together"]),
    )


def mbr(models: dict[str, Path], options: argparse.Namespace) -> None:
    from mtcore_plugins.metrics.comet import CometMetric

    count, names = options.mbr_sentences, system_names()
    pool = [output(system, TRAIN_LINES, count) for system in names]
    pool.append(lines(REFERENCE, TRAIN_LINES, count))
    m = min(options.candidates, len(pool))
    sources = lines(SOURCE, TRAIN_LINES, count)
    triples = [
        (source, pool[c][i], pool[r][i])
        for i, source in enumerate(sources)
        for c in range(m)
        for r in range(m)
    ]
    srcs, hyps, refs = (list(column) for column in zip(*triples, strict=True))
    ours = open_metric(CometMetric, models["comet"], options)
    cache = ours.runner().cache
    theirs = comet_peer(models["comet"], options.batch_size)
    warm(theirs)

    def mine() -> list[float]:
        cache.clear()
        return list(ours.segment_scores(hyps, [refs], "ja", sources=srcs))

    def peer() -> list[float]:
        return theirs([{"src": s, "mt": h, "ref": r} for s, h, r in triples])

    distinct = len(set(srcs) | set(hyps))
    print(
        f"\n2. MBR with COMET, {count} sources x {m} candidates (WMT22 outputs"
        f"{' + reference A' if m > len(names) else ''}) x the same {m} as pseudo-references: "
        f"{len(triples)} triples, {distinct} distinct texts; comet embeds {3 * len(triples)}"
    )
    if m < options.candidates:
        print(f"   ({options.candidates} candidates asked; the data has {len(pool)} a line)")
    best = race({"peer": [peer], "mtcore": [mine]}, options.rounds)
    row("comet predict, one call", len(triples), best["peer"][0])
    row(
        "mtcore segment_scores, one call",
        len(triples),
        best["mtcore"][0],
        against(best["peer"], best["mtcore"]),
    )


def kiwi(models: dict[str, Path], options: argparse.Namespace, systems: list[str]) -> None:
    from mtcore_plugins.metrics.comet import CometKiwiMetric

    n = options.segments
    src = lines(SOURCE, TRAIN_LINES, n)
    hyps = {system: output(system, TRAIN_LINES, n) for system in systems}
    ours = open_metric(CometKiwiMetric, models["cometkiwi"], options)
    theirs = comet_peer(models["cometkiwi"], options.batch_size)
    warm(theirs)

    def mine(system: str) -> Run:
        return lambda: list(
            ours.corpus_score(hyps[system], [], "ja", sources=src).details["segments"]
        )

    def peer(system: str) -> Run:
        rows = [{"src": s, "mt": h} for s, h in zip(src, hyps[system], strict=True)]
        return lambda: theirs(rows)

    total = n * len(systems)
    distinct = len({(s, h) for system in systems for s, h in zip(src, hyps[system], strict=True)})
    print(
        f"\n3. CometKiwi (unified_metric, [mt, src] encoded jointly), {len(systems)} systems x "
        f"{n} segments: {distinct} distinct (src, mt) pairs of {total}"
    )
    runs = {"peer": [peer(s) for s in systems], "mtcore": [mine(s) for s in systems]}
    best = race(runs, options.rounds)
    row("comet predict, one call per system", total, best["peer"][0])
    row(
        "mtcore corpus_score, one call per system",
        total,
        best["mtcore"][0],
        against(best["peer"], best["mtcore"]),
    )


def metricx_build(dest: str, text: list[str]) -> None:
    """Run in its own process: building holds a second copy of the weights."""
    warnings.simplefilter("ignore")
    src, hyp, ref = lines(SOURCE, 0, 100), output("NT5", 0, 100), lines(REFERENCE, 0, 100)
    calibration = [
        f"source: {s} candidate: {h} reference: {r}" for s, h, r in zip(src, hyp, ref, strict=True)
    ]
    build_metricx(Path(dest), text, calibration)


def metricx_score(model: str, n: int, threads: int, rounds: int) -> dict[str, Any]:
    """Run in a fresh process: the model's load time, the best time of each batch size (1 and
    16, alternating) with the scores, tokens an input, and the process's peak RSS."""
    warnings.simplefilter("ignore")
    import torch

    from mtcore_plugins.metrics.metricx import MetricXMetric

    torch.set_num_threads(threads)
    src, ref = lines(SOURCE, TRAIN_LINES, n), lines(REFERENCE, TRAIN_LINES, n)
    hyp = output("NT5", TRAIN_LINES, n)
    started = time.perf_counter()
    metric = MetricXMetric.from_dict({"model": model, "threads": threads, "device": "cpu"})
    metric.setup({})
    predictor = metric.predictor()
    load = time.perf_counter() - started
    metric.segment_scores(hyp[:4], [ref[:4]], "ja", sources=src[:4])  # warm-up

    def at(size: int) -> Run:
        def run() -> list[float]:
            # one loaded model for both sizes: the predictor reads its batch size per call
            predictor.config = predictor.config.model_copy(update={"batch_size": size})
            return list(metric.segment_scores(hyp, [ref], "ja", sources=src))

        return run

    best = race({"1": [at(1)], "16": [at(16)]}, rounds)
    inputs = [
        f"source: {s} candidate: {h} reference: {r}" for s, h, r in zip(src, hyp, ref, strict=True)
    ]
    tokens = predictor.encode(inputs)
    return {
        "load_s": load,
        "best": best,
        "tokens": sum(map(len, tokens)) / len(tokens),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def metricx(root: Path, text: list[str], options: argparse.Namespace) -> dict[str, Any]:
    """Build, then score in a fresh process started while this one is small: a spawned child's
    ru_maxrss starts at its parent's RSS at the fork, so the figure is the scorer's own."""
    spawn = get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        pool.submit(metricx_build, str(root / "metricx"), text).result()
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        args = (str(root / "metricx"), options.metricx_segments, options.threads, options.rounds)
        result: dict[str, Any] = pool.submit(metricx_score, *args).result()
    result["weights_mib"] = sum(p.stat().st_size for p in (root / "metricx").glob("*.safetensors"))
    result["weights_mib"] /= 2**20
    return result


def show_metricx(result: dict[str, Any], n: int) -> None:
    print(
        f"\n4. MetricX-24 (mT5 d_model {MT5['d_model']}, {MT5['num_layers']}+{MT5['num_layers']} "
        f"layers, {result['weights_mib']:.0f} MiB of fp32 weights), {n} segments of NT5 with "
        f"source and reference A: {result['tokens']:.0f} tokens an input; model load "
        f"{result['load_s']:.1f} s"
    )
    one, sixteen = result["best"]["1"], result["best"]["16"]
    row("mtcore metricx, batch_size 1", n, one[0])
    ratio = f"x{one[0] / sixteen[0]:.2f} of batch 1  max |diff| {max_diff(sixteen[1], one[1]):.1e}"
    row("mtcore metricx, batch_size 16", n, sixteen[0], ratio)
    print(f"  peak RSS of the scoring process (load + all runs): {result['peak_rss_mib']:.0f} MiB")


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, default=4, help="COMET: systems scored")
    parser.add_argument("--segments", type=int, default=100, help="COMET, CometKiwi: a system")
    parser.add_argument(
        "--candidates",
        type=int,
        default=14,
        help="MBR: candidates a sentence (at most 14: the 13 WMT22 systems and reference A)",
    )
    parser.add_argument("--mbr-sentences", type=int, default=3)
    parser.add_argument("--kiwi-systems", type=int, default=2)
    parser.add_argument("--metricx-segments", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16, help="COMET: both implementations")
    parser.add_argument(
        "--rounds", type=int, default=1, help="best of (3: firmer ratios, 3x as long)"
    )
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    parser.add_argument("--only", default=",".join(SECTIONS), help="sections, comma-separated")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    options = parser.parse_args(argv)
    if options.quick:
        options.systems, options.segments, options.kiwi_systems = 2, 40, 2
        options.candidates, options.mbr_sentences, options.metricx_segments = 6, 3, 16
    sections = [s for s in options.only.split(",") if s]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}; valid: {', '.join(SECTIONS)}")
    if not SOURCE.exists():
        raise SystemExit(f"real data not found at {SOURCE}")
    started = time.perf_counter()
    text = training_text()
    with tempfile.TemporaryDirectory(prefix="neural_metrics.") as tmp:
        root = Path(tmp)
        # MetricX first, in fresh processes, while this process is small (see metricx())
        measured = metricx(root, text, options) if "metricx" in sections else None
        quiet()
        import torch

        torch.set_num_threads(options.threads)
        print(
            f"WMT22 en-ja lines {TRAIN_LINES}+ (vocabularies learnt on lines 0-{TRAIN_LINES - 1})"
            f"; threads {options.threads}, COMET batch_size {options.batch_size}, best of "
            f"{options.rounds} rounds; torch {torch.__version__}, unbabel-comet "
            f"{version('unbabel-comet')}"
        )
        print(
            f"COMET encoder: XLM-R hidden {XLMR['hidden_size']}, {XLMR['num_hidden_layers']} "
            f"layers, {XLMR['num_attention_heads']} heads, FFN {XLMR_FFN}; estimator "
            f"{HEAD['hidden_sizes']}"
        )
        print(f"  {'':46} {'inputs':>6} {'time':>9} {'rate':>10}")
        models = build_comet(root, text) if {"comet", "mbr", "kiwi"} & set(sections) else {}
        if "comet" in sections:
            comet_systems(models, options, system_names()[: options.systems])
        if "mbr" in sections:
            mbr(models, options)
        if "kiwi" in sections:
            kiwi(models, options, system_names()[: options.kiwi_systems])
        if measured is not None:
            show_metricx(measured, options.metricx_segments)
    print(f"\nwhole bench: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
