"""MetricX (metrics ``metricx``, ``metricx_qe``; scorer ``metricx_qe``) on a tiny random MetricX
(tests/support/tiny_metricx.py) and real WMT22 lines: the input strings and token ids of the
released predict.py, the model against transformers' own mT5 computing the same logit, batching and
deduplication that change no score, the refusal of code in a model directory, and the signature."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from mtcore.api import DataError, PluginError
from mtcore_plugins.common.neural_metrics.metricx_config import MetricXConfig, format_input
from mtcore_plugins.metrics.metricx import MetricXMetric, MetricXQEMetric
from tests.support.tiny_metricx import FILES, REGRESSION_ID, build, real_lines

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

PADDING_NOISE = 2e-5
"""How far a score may move when its input is batched with others: padding changes the order
of fp32 sums (measured: up to 8e-6 on scores of 5-20), unbatched the numbers are exact."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [str(p) for p in FILES.values() if not p.exists()]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"real data not found: {missing}")
        pytest.skip(f"real data not found: {missing}")
    return build(tmp_path_factory.mktemp("metricx") / "tiny-metricx")


@pytest.fixture(scope="module")
def enja() -> dict[str, list[str]]:
    """Raw (unsegmented) WMT22 en-ja lines: English sources, Japanese hypotheses and reference."""
    return {k: real_lines(f"en_ja_{k}", 24) for k in ("src", "hyp", "ref")}


def metricx(model: Path | str, qe: bool = False, **settings: object) -> MetricXMetric:
    cls = MetricXQEMetric if qe else MetricXMetric
    return cls(MetricXConfig.model_validate({"model": str(model), **settings}))


@pytest.mark.parametrize(
    ("version", "reference", "expected"),
    [
        # metricx24/predict.py, _make_input, not is_qe
        (24, "R", "source: S candidate: H reference: R"),
        # metricx24/predict.py, is_qe: the reference is not read at all
        (24, None, "source: S candidate: H"),
        # metricx23/predict.py: no source with a reference; the source after the candidate in QE
        (23, "R", "candidate: H reference: R"),
        (23, None, "candidate: H source: S"),
        # the released code concatenates as is: an empty reference keeps its separator
        (24, "", "source: S candidate: H reference: "),
    ],
)
def test_input_format_is_the_released_one(version, reference, expected):
    assert format_input("S", "H", reference, version) == expected


def test_token_ids_are_the_released_ones(tiny, enja):
    """predict.py tokenizes with truncation at max_input_length, then drops the last token
    (``_remove_eos``): the SentencePiece ids of the text, cut to length - 1 when truncated."""
    import sentencepiece as spm

    pieces = spm.SentencePieceProcessor(model_file=str(tiny / "tokenizer" / "spiece.model"))
    texts = [format_input(s, h, r, 24) for s, h, r in zip(*enja.values(), strict=True)]
    predictor = metricx(tiny).predictor()
    assert predictor.encode(texts) == [pieces.encode(t) for t in texts]
    short = metricx(tiny, max_input_length=16).predictor()
    cut = short.encode(texts)
    assert all(len(ids) == 15 for ids in cut)  # 16 kept with </s>, then the last one removed
    assert cut == [pieces.encode(t)[:15] for t in texts]


def test_model_matches_transformers_mt5_computing_the_logit(tiny, tmp_path, enja):
    """The released computation written out with transformers' own MT5ForConditionalGeneration
    (one decoder step from id 0, logit 250089, clamped to [0, 25]), one input at a time without
    padding, against the plugin unbatched (the same numbers) and batched by 5 (padding changes
    the order of fp32 sums: a few units in the 6th digit); also with tied embeddings (the
    rescaled head)."""
    import torch
    from transformers import MT5ForConditionalGeneration

    tied = build(tmp_path / "tied", seed=2, tie=True)
    for model_dir in (tiny, tied):
        metric = metricx(model_dir, batch_size=1)
        alone = metric.segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
        batched = metricx(model_dir, batch_size=5).segment_scores(
            enja["hyp"], [enja["ref"]], "ja", sources=enja["src"]
        )
        reference = MT5ForConditionalGeneration.from_pretrained(str(model_dir)).eval()
        tokenizer = metric.predictor().tokenizer
        expected = []
        for s, h, r in zip(enja["src"], enja["hyp"], enja["ref"], strict=True):
            ids = tokenizer(f"source: {s} candidate: {h} reference: {r}")["input_ids"][:-1]
            with torch.no_grad():
                logits = reference(
                    input_ids=torch.tensor([ids]), decoder_input_ids=torch.zeros((1, 1)).long()
                ).logits
            expected.append(float(logits[0, 0, REGRESSION_ID].clamp(0, 25)))
        assert alone == pytest.approx(expected, abs=1e-6)
        assert batched == pytest.approx(expected, abs=PADDING_NOISE)
        assert sum(0 < x < 25 for x in expected) >= 20  # numbers, not the clamp's bounds


def test_batching_and_duplicates_change_no_score(tiny, enja):
    hyps = enja["hyp"][:10] + enja["hyp"][:3]  # three inputs twice
    refs, src = enja["ref"][:10] + enja["ref"][:3], enja["src"][:10] + enja["src"][:3]
    one = metricx(tiny, batch_size=1).segment_scores(hyps, [refs], "ja", sources=src)
    five = metricx(tiny, batch_size=5).segment_scores(hyps, [refs], "ja", sources=src)
    assert five == pytest.approx(one, abs=PADDING_NOISE)
    assert five[10:] == five[:3]


def test_scores_are_deterministic_and_in_range(tiny, enja):
    first = metricx(tiny).segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    again = metricx(tiny).segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    assert first == again
    assert all(0.0 <= x <= 25.0 for x in first)


def test_scores_are_clamped_to_0_25(tiny, tmp_path, enja):
    """A head row scaled a hundredfold drives logits far outside [0, 25]: the clamp holds."""
    from safetensors.torch import load_file, save_file

    loud = tmp_path / "loud"
    shutil.copytree(tiny, loud)
    state = load_file(str(loud / "model.safetensors"))
    state["lm_head.weight"][REGRESSION_ID] *= 100
    save_file(state, str(loud / "model.safetensors"), metadata={"format": "pt"})
    scores = metricx(loud).segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    assert min(scores) == 0.0 and max(scores) == 25.0


def test_qe_reads_no_reference(tiny, enja):
    qe = metricx(tiny, qe=True)
    other = list(reversed(enja["ref"]))
    a = qe.segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    b = qe.segment_scores(enja["hyp"], [other, enja["ref"]], "ja", sources=enja["src"])
    assert a == b
    with_ref = metricx(tiny).segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    assert a != pytest.approx(with_ref, abs=1e-3)
    assert (MetricXQEMetric.needs_reference, MetricXMetric.needs_reference) == (False, True)
    for cls in (MetricXMetric, MetricXQEMetric):
        assert (cls.needs_source, cls.heavy, cls.higher_is_better) == (True, True, False)


def test_refuses_a_config_with_auto_map_or_another_model_type(tiny, tmp_path, enja):
    for change, message in (({"auto_map": {"AutoModel": "x.Y"}}, "auto_map"), (
        {"model_type": "t5"}, "model_type")):  # fmt: skip
        bad = tmp_path / message
        shutil.copytree(tiny, bad)
        config = json.loads((bad / "config.json").read_text()) | change
        (bad / "config.json").write_text(json.dumps(config))
        with pytest.raises(DataError, match=message):
            metricx(bad).segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])


class Payload:
    """A pickle that creates a file when unpickled: what a crafted checkpoint would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_refuses_pickled_weights_with_code(tiny, tmp_path, enja):
    import torch
    from safetensors.torch import load_file

    plain = tmp_path / "plain"
    shutil.copytree(tiny, plain)
    state = load_file(str(plain / "model.safetensors"))
    (plain / "model.safetensors").unlink()
    torch.save(state, plain / "pytorch_model.bin")
    expected = metricx(tiny).segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    got = metricx(plain).segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    assert got == pytest.approx(expected, abs=1e-6)  # plain tensors in a pickle are read

    crafted = tmp_path / "crafted"
    shutil.copytree(plain, crafted)
    marker = tmp_path / "payload-ran"
    torch.save({**state, "extra": Payload(marker)}, crafted / "pytorch_model.bin")
    with pytest.raises(DataError, match="weights_only"):
        metricx(crafted).segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    assert not marker.exists()


def test_signature_names_model_revision_and_settings(tiny, tmp_path, enja):
    args = (enja["hyp"][:4], [enja["ref"][:4]], "ja")
    score = metricx(tiny).corpus_score(*args, sources=enja["src"][:4])
    assert score.signature == (
        "nrefs:1|model:tiny/metricx-24|rev:r1|mode:ref|bs:8|prec:fp32|len:1536|version:24"
    )
    assert score.metric == "MetricX-24"
    qe = metricx(tiny, qe=True, batch_size=2, max_input_length=512)
    score = qe.corpus_score(*args, sources=enja["src"][:4])
    assert score.signature.startswith("nrefs:0|model:tiny/metricx-24|rev:r1|mode:qe|bs:2|")
    assert score.signature.endswith("|len:512|version:24") and score.metric == "MetricX-24-QE"
    bare = tmp_path / "metricx-bare"  # no mtcore-model.json: the name and the weights' digest
    shutil.copytree(tiny, bare)
    (bare / "mtcore-model.json").unlink()
    digest = hashlib.sha256((bare / "model.safetensors").read_bytes()).hexdigest()[:12]
    score = metricx(bare).corpus_score(*args, sources=enja["src"][:4])
    assert score.signature.startswith(f"nrefs:1|model:metricx-bare|rev:{digest}|mode:ref|")


def test_real_lines_with_two_references(tiny):
    """zh-en: raw Chinese sources, WMT22's two references; a segment scores their mean."""
    src, hyp = real_lines("zh_en_src", 16), real_lines("zh_en_hyp", 16)
    refs = [real_lines("zh_en_ref", 16), real_lines("zh_en_ref_b", 16)]
    metric = metricx(tiny, batch_size=4)
    score = metric.corpus_score(hyp, refs, "en", sources=src)
    each = [metric.segment_scores(hyp, [r], "en", sources=src) for r in refs]
    segments = score.details["segments"]
    mean = [(a + b) / 2 for a, b in zip(*each, strict=True)]
    assert segments == pytest.approx(mean, abs=PADDING_NOISE)
    assert score.score == pytest.approx(sum(segments) / len(segments), abs=1e-4)
    assert score.details["per_reference"] == pytest.approx(
        [sum(e) / len(e) for e in each], abs=1e-4
    )
    assert score.signature.startswith("nrefs:2|")


def test_model_as_a_step_input_and_picklable_before_and_after_loading(tiny, enja):
    metric = metricx("mx")
    pickle.loads(pickle.dumps(metric))
    with pytest.raises(PluginError, match="connected: none"):
        metric.segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    metric.setup({"mx": tiny})
    first = metric.segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"])
    copy = pickle.loads(pickle.dumps(metric))
    assert copy._predictor is None
    assert copy.segment_scores(enja["hyp"], [enja["ref"]], "ja", sources=enja["src"]) == first
    with pytest.raises(PluginError, match="sources"):
        metric.segment_scores(enja["hyp"], [enja["ref"]], "ja")
    with pytest.raises(ValueError, match="not a directory"):
        metricx("/no/such/metricx")


def test_a_saved_tokenizer_gives_the_same_ids(tiny, tmp_path, enja):
    """A tokenizer directory with tokenizer_config.json loads through AutoTokenizer, as the
    released predict.py loads google/mt5-xl's; the ids equal those of spiece.model alone."""
    saved = tmp_path / "mt5-tokenizer"
    metricx(tiny).predictor().tokenizer.save_pretrained(str(saved))
    texts = [format_input(s, h, None, 24) for s, h in zip(enja["src"], enja["hyp"], strict=True)]
    auto = metricx(tiny, tokenizer=str(saved)).predictor()
    assert type(auto.tokenizer).__name__ == "T5TokenizerFast"
    assert auto.encode(texts) == metricx(tiny).predictor().encode(texts)


def test_bf16_runs_close_to_fp32(tiny, enja):
    args = (enja["hyp"][:8], [enja["ref"][:8]], "ja")
    fp32 = metricx(tiny).segment_scores(*args, sources=enja["src"][:8])
    bf16 = metricx(tiny, precision="bf16").segment_scores(*args, sources=enja["src"][:8])
    assert bf16 == pytest.approx(fp32, abs=1.0)


def test_rerank_feature_is_the_qe_score(tiny, enja):
    from mtcore.api import load_registry

    scorer = load_registry().load("scorers", "metricx_qe").from_dict({"model": "mx"})
    scorer.setup("en", "ja", {"mx": tiny})
    pairs = list(zip(enja["src"], enja["hyp"], strict=True))
    qe = metricx(tiny, qe=True).segment_scores(enja["hyp"], [], "ja", sources=enja["src"])
    assert scorer.score(pairs) == qe


def test_evaluate_scores_it_in_a_spawned_worker(tiny, enja):
    """The evaluate step's path for a heavy metric: the metric, not yet loaded, pickled into a
    spawned process that sets it up with the step's inputs and scores there."""
    from mtcore_plugins.common.runtime.isolated import run_in_worker, stop_workers
    from mtcore_plugins.steps.evaluate import score_one

    metric = metricx("mx", batch_size=4)
    args = (enja["hyp"][:6], [enja["ref"][:6]], "ja", enja["src"][:6], {"mx": str(tiny)})
    try:
        score = run_in_worker("test-metricx", "metricx", score_one, metric, *args)
    finally:
        stop_workers()
    here = metricx(tiny, batch_size=4).segment_scores(
        enja["hyp"][:6], [enja["ref"][:6]], "ja", sources=enja["src"][:6]
    )
    assert score.details["segments"] == here
    assert score.signature.startswith("nrefs:1|model:tiny/metricx-24|rev:r1|mode:ref|bs:4|")


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="torch sees no CUDA device")
def test_cuda_scores_as_the_cpu_does(tiny, enja):
    """On the GPU (fp32, and bf16 as the released bf16 checkpoints run) the scores are the
    CPU's, up to the GPU's own sums; ``device: cpu`` on a GPU machine stays on the CPU (the
    released code's decoder input would move to CUDA)."""
    args = (enja["hyp"], [enja["ref"]], "ja")
    cpu = metricx(tiny, device="cpu").segment_scores(*args, sources=enja["src"])
    cuda = metricx(tiny, device="cuda", batch_size=5)
    assert cuda.segment_scores(*args, sources=enja["src"]) == pytest.approx(cpu, abs=1e-3)
    assert next(cuda.predictor().model.parameters()).is_cuda
    bf16 = metricx(tiny, device="cuda", precision="bf16").segment_scores(*args, sources=enja["src"])
    assert bf16 == pytest.approx(cpu, abs=1.0)
