"""The COMET family (comet, cometkiwi, xcomet) and the cometkiwi rerank feature on tiny random
models (tests/support/tiny_comet.py): the same scores as comet's own loader and ``predict``, each
distinct input encoded once, batching-invariant, deterministic, signed; checkpoints and hparams
read as data only; real raw Japanese lines through the tokenizer."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from statistics import fmean, pstdev
from typing import Any

import pytest
import yaml

from mtcore.api import PluginError
from mtcore_plugins.common.neural_metrics.comet import CometModelConfig, CometRunner, model_files
from mtcore_plugins.metrics.comet import (
    CometConfig,
    CometKiwiMetric,
    CometMetric,
    XCometMetric,
)
from mtcore_plugins.scorers.cometkiwi import CometKiwiScorer
from tests.support.tiny_comet import REFERENCE, TRAIN_LINES, build_all, wmt22_lines

pytest.importorskip("comet")
if not REFERENCE.exists():
    pytest.skip(f"real data not found at {REFERENCE}", allow_module_level=True)

METRICS: dict[str, Any] = {
    "comet": CometMetric,
    "cometkiwi": CometKiwiMetric,
    "xcomet": XCometMetric,
    "comet_qe": CometKiwiMetric,  # the QE metric also reads referenceless_regression_metric
}
TOLERANCE = 1e-5


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_all(tmp_path_factory.mktemp("tiny_comet"))


@pytest.fixture(scope="module")
def lines() -> dict[str, list[str]]:
    """24 real WMT22 en-ja segments the vocabulary was not trained on."""
    return wmt22_lines(TRAIN_LINES, 24)


def metric(kind: str, model: Path | str, resources: dict[str, Path] | None = None, **settings: Any):
    plugin = METRICS[kind].from_dict({"model": str(model), **settings})
    plugin.setup(resources or {})
    return plugin


def comets_own(model_dir: Path, rows: list[dict[str, str]], batch_size: int = 4) -> list[float]:
    """Scores by comet's own loader and Lightning predict: the reference implementation."""
    from comet import load_from_checkpoint

    model = load_from_checkpoint(str(model_dir / "checkpoints" / "model.ckpt"))
    return list(model.predict(rows, batch_size=batch_size, gpus=0, progress_bar=False).scores)


def rows(
    lines: dict[str, list[str]], system: str = "NT5", ref: bool = True
) -> list[dict[str, str]]:
    keys = ("src", system, "ref") if ref else ("src", system)
    return [
        dict(zip(("src", "mt", "ref"), values, strict=False))
        for values in zip(*(lines[k] for k in keys), strict=True)
    ]


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b, strict=True)) < TOLERANCE


def copy_model(tiny: dict[str, Path], kind: str, dest: Path) -> Path:
    return Path(shutil.copytree(tiny[kind], dest / kind))


# --- equal to comet's own loader and predict ------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "with_refs"),
    [
        ("comet", True),  # COMET-22: embeddings of src, mt, ref; estimator on the six features
        ("cometkiwi", False),  # unified_metric, [mt, src] jointly encoded
        ("xcomet", True),  # three joint inputs plus the MQM score of the detected spans
        ("comet_qe", False),  # referenceless_regression_metric: embeddings of src and mt
    ],
)
def test_scores_equal_comets_own_predict(tiny, lines, kind, with_refs):
    ours = metric(kind, tiny[kind], batch_size=5)
    score = ours.corpus_score(lines["NT5"], [lines["ref"]], "ja", sources=lines["src"])
    theirs = comets_own(tiny[kind], rows(lines, ref=with_refs))
    segments = score.details["segments"]
    assert pstdev(theirs) > 0.01  # the random model tells segments apart: the check can fail
    assert close(segments, theirs)
    assert score.score == pytest.approx(fmean(theirs), abs=1e-4)


def test_xcomet_without_references_is_its_qe_mode(tiny, lines):
    qe = metric("xcomet", tiny["xcomet"], reference=False)
    segments = qe.segment_scores(lines["NT5"], [lines["ref"]], "ja", sources=lines["src"])
    assert close(segments, comets_own(tiny["xcomet"], rows(lines, ref=False)))
    with_refs = metric("xcomet", tiny["xcomet"]).segment_scores(
        lines["NT5"], [lines["ref"]], "ja", sources=lines["src"]
    )
    assert not close(segments, with_refs)


@pytest.mark.parametrize("kind", ["comet", "cometkiwi", "xcomet", "comet_qe"])
def test_loader_builds_the_model_comets_loader_builds(tiny, kind):
    from comet import load_from_checkpoint

    files = model_files(str(tiny[kind]), {}, "test")
    ours = CometRunner.open(files, CometModelConfig(model=str(tiny[kind])), [kind_class(kind)], "t")
    theirs = load_from_checkpoint(str(files.checkpoint)).state_dict()
    mine = ours.model.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(mine[key].equal(theirs[key]) for key in mine)
    assert not ours.model.training


def kind_class(kind: str) -> str:
    return {
        "comet": "regression_metric",
        "cometkiwi": "unified_metric",
        "xcomet": "xcomet_metric",
        "comet_qe": "referenceless_regression_metric",
    }[kind]


# --- efficiency, batching, determinism --------------------------------------------------------


def test_mbr_repeats_are_encoded_once_and_score_as_naive(tiny, lines):
    """MBR: every candidate against every other as pseudo-reference. 4 sources and 5
    candidates give 80 triples but only 24 distinct sentences to embed."""
    sources = lines["src"][:4]
    candidates = [[lines[s][i] for s in ("NT5", "Online-A", "DLUT")] for i in range(4)]
    for i, group in enumerate(candidates):
        group += [lines["ref"][i], group[0] + " 。"]  # five distinct candidates a source
    triples = [
        (source, hyp, pseudo)
        for source, group in zip(sources, candidates, strict=True)
        for i, hyp in enumerate(group)
        for j, pseudo in enumerate(group)
        if i != j
    ]
    srcs, hyps, refs = (list(column) for column in zip(*triples, strict=True))
    distinct = len(set(sources) | {text for group in candidates for text in group})
    assert len(hyps) == 80 and distinct == 24
    comet = metric("comet", tiny["comet"], batch_size=3)
    segments = comet.segment_scores(hyps, [refs], "ja", sources=srcs)
    assert comet.runner().stats == {"inputs": 80, "encoded": distinct}
    naive = comets_own(
        tiny["comet"], [dict(zip(("src", "mt", "ref"), t, strict=True)) for t in triples]
    )
    assert close(segments, naive)


@pytest.mark.parametrize("kind", ["comet", "cometkiwi", "xcomet", "comet_qe"])
def test_batching_invariant_and_deterministic(tiny, lines, kind):
    def scores(batch_size: int) -> list[float]:
        plugin = metric(kind, tiny[kind], batch_size=batch_size)
        return plugin.segment_scores(lines["Online-A"], [lines["ref"]], "ja", sources=lines["src"])

    one = scores(1)
    assert close(one, scores(7))
    assert scores(7) == scores(7)  # same batches: the very same numbers (eval mode, no dropout)


def test_joint_inputs_are_deduplicated(tiny, lines):
    kiwi = metric("cometkiwi", tiny["cometkiwi"])
    hyps = lines["NT5"][:6] * 3
    segments = kiwi.segment_scores(hyps, [], "ja", sources=lines["src"][:6] * 3)
    assert kiwi.runner().stats == {"inputs": 18, "encoded": 6}
    assert segments[:6] == segments[6:12] == segments[12:]


# --- references, signature, settings ----------------------------------------------------------


def test_qe_metric_ignores_references(tiny, lines):
    kiwi = metric("cometkiwi", tiny["cometkiwi"])
    score = kiwi.corpus_score(lines["NT5"], [lines["ref"]], "ja", sources=lines["src"])
    shuffled = kiwi.corpus_score(lines["NT5"], [lines["ref"][::-1]], "ja", sources=lines["src"])
    none = kiwi.corpus_score(lines["NT5"], [], "ja", sources=lines["src"])
    assert score.details["segments"] == shuffled.details["segments"] == none.details["segments"]
    assert score.signature.startswith("nrefs:0|") and score.metric == "CometKiwi"
    assert CometKiwiMetric.needs_reference is False and CometKiwiMetric.needs_source is True


def test_several_references_average_per_segment(tiny, lines):
    comet = metric("comet", tiny["comet"])
    refs = [lines["ref"], lines["DLUT"]]
    both = comet.corpus_score(lines["NT5"], refs, "ja", sources=lines["src"])
    each = [comet.segment_scores(lines["NT5"], [r], "ja", sources=lines["src"]) for r in refs]
    assert close(both.details["segments"], [fmean(pair) for pair in zip(*each, strict=True)])
    assert both.details["per_reference"] == [round(fmean(s), 4) for s in each]
    assert both.signature.startswith("nrefs:2|")


def test_signature_names_model_revision_batch_size_precision(tiny, lines, tmp_path):
    from mtcore.api import content_hash

    plain = metric("comet", tiny["comet"], batch_size=8)
    score = plain.corpus_score(lines["NT5"], [lines["ref"]], "ja", sources=lines["src"])
    sha = content_hash(tiny["comet"] / "checkpoints" / "model.ckpt")[:12]
    assert score.signature == f"nrefs:1|model:comet|rev:{sha}|bs:8|prec:fp32|version:2.2.7"
    named = copy_model(tiny, "comet", tmp_path)
    identity = {
        "id": "Unbabel/wmt22-comet-da",
        "revision": "2760a223ac957f30acfb18c8aa649b01cf1d75f2",
    }
    (named / "mtcore-model.json").write_text(json.dumps(identity))
    again = metric("comet", named).corpus_score(
        lines["NT5"], [lines["ref"]], "ja", sources=lines["src"]
    )
    assert "|model:Unbabel/wmt22-comet-da|rev:2760a223ac957f30acfb18c8aa649b01cf1d75f2|" in (
        again.signature
    )
    assert close(again.details["segments"], score.details["segments"])


def test_bf16_runs_on_the_cpu_and_fp16_is_refused(tiny, lines):
    fp32 = metric("comet", tiny["comet"], device="cpu")
    bf16 = metric("comet", tiny["comet"], device="cpu", precision="bf16")
    a = fp32.segment_scores(lines["NT5"], [lines["ref"]], "ja", sources=lines["src"])
    b = bf16.segment_scores(lines["NT5"], [lines["ref"]], "ja", sources=lines["src"])
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 0.05 and a != b
    assert "|prec:bf16|" in bf16.signature(1)
    with pytest.raises(ValueError, match="fp16 needs a GPU"):
        CometConfig(model=str(tiny["comet"]), device="cpu", precision="fp16")


def test_model_names_a_step_input_or_a_path(tiny, lines):
    by_role = metric("comet", "comet22", resources={"comet22": tiny["comet"]})
    assert by_role.segment_scores(lines["NT5"][:3], [lines["ref"][:3]], "ja", lines["src"][:3])
    CometConfig(model="comet22")  # a role: checked when the step connects it, not here
    with pytest.raises(ValueError, match="does not exist"):
        CometConfig(model="models/wmt22-comet-da")
    lost = metric("comet", "comet22")
    with pytest.raises(PluginError, match=r"neither an input connected .* \(connected: none\)"):
        lost.segment_scores(["a"], [["a"]], "ja", sources=["a"])


def test_metric_pickles_before_and_after_loading(tiny, lines):
    comet = metric("comet", tiny["comet"])
    assert CometMetric.heavy and XCometMetric.heavy and CometMetric.needs_source
    pickle.loads(pickle.dumps(comet))  # the evaluate step ships it to a worker unloaded
    comet.segment_scores(lines["NT5"][:2], [lines["ref"][:2]], "ja", sources=lines["src"][:2])
    assert "_runner" not in pickle.loads(pickle.dumps(comet)).__dict__


# --- refused inputs ---------------------------------------------------------------------------


class Payload:
    """Unpickled, it opens (creates) a file: a stand-in for any code a pickle may run."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.target), "w"))


def test_hostile_checkpoint_is_refused_without_running_code(tiny, tmp_path):
    import torch

    model = copy_model(tiny, "comet", tmp_path)
    marker = tmp_path / "pwned"
    checkpoint = model / "checkpoints" / "model.ckpt"
    torch.save({"state_dict": {"x": Payload(marker)}}, checkpoint)
    torch.load(checkpoint, weights_only=False)  # the payload is real: unsafe loading runs it
    assert marker.exists()
    marker.unlink()
    with pytest.raises(
        PluginError, match=r"was refused: .*GLOBAL (io|builtins)\.open was not an allowed global\)"
    ):
        metric("comet", model).segment_scores(["a"], [["a"]], "ja", sources=["a"])
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        # what a clone without `git lfs pull` leaves (COMET issue #188: "invalid load key 'v'")
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n", "is a Git LFS pointer"),
        (b"\x00\x01 not a checkpoint", "is not a readable torch checkpoint"),
    ],
)
def test_unreadable_checkpoint_is_explained(tiny, tmp_path, content, message):
    model = copy_model(tiny, "comet", tmp_path)
    (model / "checkpoints" / "model.ckpt").write_bytes(content)
    with pytest.raises(PluginError, match=message):
        metric("comet", model).segment_scores(["a"], [["a"]], "ja", sources=["a"])


def test_hostile_hparams_are_refused_without_running_code(tiny, tmp_path):
    model = copy_model(tiny, "comet", tmp_path)
    marker = tmp_path / "pwned"
    hparams = model / "hparams.yaml"
    hparams.write_text(f"class_identifier: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(PluginError, match="is not plain YAML data"):
        metric("comet", model).segment_scores(["a"], [["a"]], "ja", sources=["a"])
    assert not marker.exists()


def test_unknown_class_identifier_is_refused(tiny, tmp_path):
    model = copy_model(tiny, "comet", tmp_path)
    hparams = yaml.safe_load((model / "hparams.yaml").read_text())
    (model / "hparams.yaml").write_text(
        yaml.safe_dump({**hparams, "class_identifier": "ranking_metric"})
    )
    with pytest.raises(
        PluginError,
        match=r"class_identifier 'ranking_metric' .* valid: regression_metric, "
        r"referenceless_regression_metric, unified_metric, xcomet_metric",
    ):
        metric("comet", model).segment_scores(["a"], [["a"]], "ja", sources=["a"])


def test_a_metric_refuses_another_kind_of_model(tiny):
    with pytest.raises(
        PluginError,
        match=r"metric 'comet' scores with reference-based COMET .* holds a unified_metric "
        r"model \(CometKiwi",
    ):
        metric("comet", tiny["cometkiwi"]).segment_scores(["a"], [["a"]], "ja", sources=["a"])


def test_checkpoint_must_match_its_hparams(tiny, tmp_path):
    import torch

    model = copy_model(tiny, "comet", tmp_path)
    checkpoint = torch.load(model / "checkpoints" / "model.ckpt", weights_only=True)
    del checkpoint["state_dict"]["estimator.ff.0.weight"]
    torch.save(checkpoint, model / "checkpoints" / "model.ckpt")
    with pytest.raises(
        PluginError, match=r"does not match its hparams.yaml: missing \['estimator.ff.0.weight'\]"
    ):
        metric("comet", model).segment_scores(["a"], [["a"]], "ja", sources=["a"])


def test_encoder_directory_is_local_and_explained(tiny, lines, tmp_path):
    """Released models name their encoder by hub id (xlm-roberta-large): it must be a local
    directory, given as ``encoder:`` or put in the model's ``encoder/``."""
    import torch

    model = copy_model(tiny, "comet", tmp_path)
    hparams = yaml.safe_load((model / "hparams.yaml").read_text())
    (model / "hparams.yaml").write_text(
        yaml.safe_dump({**hparams, "pretrained_model": "xlm-roberta-large"})
    )
    saved = model / "checkpoints" / "model.ckpt"
    checkpoint = torch.load(saved, weights_only=True)
    checkpoint["hyper_parameters"]["pretrained_model"] = "xlm-roberta-large"
    torch.save(checkpoint, saved)
    with pytest.raises(
        PluginError,
        match=r"needs its encoder \('xlm-roberta-large'\) as a local directory .* set `encoder:`",
    ):
        metric("comet", model).segment_scores(["a"], [["a"]], "ja", sources=["a"])

    def scores(plugin: Any) -> list[float]:
        return plugin.segment_scores(lines["NT5"][:4], [lines["ref"][:4]], "ja", lines["src"][:4])

    expected = scores(metric("comet", tiny["comet"]))
    assert scores(metric("comet", model, encoder=str(tiny["encoder"]))) == expected
    (model / "encoder").mkdir()  # fetch_model's layout: the tokenizer's SentencePiece model only
    for name in ("config.json", "sentencepiece.bpe.model"):
        shutil.copy(tiny["encoder"] / name, model / "encoder" / name)
    assert scores(metric("comet", model)) == expected


# --- the rerank feature -----------------------------------------------------------------------


def test_cometkiwi_scorer_scores_each_distinct_pair_once(tiny, lines):
    scorer = CometKiwiScorer.from_dict({"model": "kiwi"})
    scorer.setup("en", "ja", {"kiwi": tiny["cometkiwi"]})
    pairs = list(zip(lines["src"][:5], lines["NT5"][:5], strict=True))
    pairs += pairs[:3]
    scores = scorer.score(pairs)
    assert scorer.runner.stats == {"inputs": 8, "encoded": 5}
    assert scores[5:] == scores[:3]
    expected = comets_own(tiny["cometkiwi"], [{"src": s, "mt": h} for s, h in pairs[:5]])
    assert close(scores[:5], expected)


# --- real unsegmented Japanese ----------------------------------------------------------------


def test_raw_japanese_lines_tokenize_and_rank_systems(tiny):
    """36 raw WMT22 Japanese lines (no spaces between words) per system, past the lines the
    vocabulary was learnt on: SentencePiece splits them into pieces, few unknown."""
    real = wmt22_lines(TRAIN_LINES + 100, 36)
    comet = metric("comet", tiny["comet"], batch_size=16)
    tokenizer = comet.runner().model.encoder.tokenizer
    encoded = tokenizer(real["NT5"])["input_ids"]
    pieces = sum(len(ids) - 2 for ids in encoded)
    unknown = sum(ids.count(tokenizer.unk_token_id) for ids in encoded)
    assert pieces > 5 * len(encoded) and unknown < 0.05 * pieces
    scores = {
        system: comet.corpus_score(real[system], [real["ref"]], "ja", sources=real["src"])
        for system in ("NT5", "Online-A", "DLUT")
    }
    assert len({score.score for score in scores.values()}) == 3
    assert close(
        scores["DLUT"].details["segments"], comets_own(tiny["comet"], rows(real, "DLUT"), 16)
    )
    texts = {text for key in ("src", "ref", "NT5", "Online-A", "DLUT") for text in real[key]}
    assert comet.runner().stats["encoded"] == len(texts)  # src and ref once for three systems


def test_cometkiwi_is_a_rerank_feature_that_mert_weighs(tiny, tmp_path):
    """QE reranking in a rerank step: real candidate lists (the three WMT22 systems' outputs of
    each source, in that order), CometKiwi's column beside the word penalty, weights tuned by
    MERT on a dev n-best; the step's column is the scorer's own score and every line's choice
    is the best under the tuned weights."""
    from mtcore_plugins.steps._nbest import read_nbest
    from mtcore_plugins.steps.rerank import RerankStep
    from tests.plugins.steps.test_rerank import context, write_corpus, write_nbest

    def nbest(start: int, count: int, name: str) -> tuple[Path, dict[str, list[str]]]:
        real = wmt22_lines(start, count)
        candidates = [[(real[s][i], {}) for s in ("NT5", "Online-A", "DLUT")] for i in range(count)]
        return write_nbest(tmp_path / name, real["src"], candidates), real

    dev, dev_lines = nbest(TRAIN_LINES, 30, "dev")
    test, test_lines = nbest(TRAIN_LINES + 30, 20, "test")
    dev_ref = write_corpus(tmp_path / "dev_ref", dev_lines["src"], dev_lines["ref"])
    features = [{"name": "cometkiwi", "model": str(tiny["cometkiwi"])}, "word_penalty"]
    step = RerankStep.from_dict({"features": features, "tuner": {"name": "mert", "restarts": 3}})
    step.run(context(tmp_path / "rr", nbest=test, dev_nbest=dev, dev_ref=dev_ref))
    report = json.loads((tmp_path / "rr/weights/weights.json").read_text())
    weights = report["weights"]
    assert report["tuner"] == "mert" and set(weights) == {"cometkiwi", "word_penalty"}
    entries = list(read_nbest(tmp_path / "rr/nbest/nbest.jsonl"))
    kiwi = metric("cometkiwi", tiny["cometkiwi"])
    for entry in entries[:5]:
        texts = [text for text, _ in entry.hyps]
        own = kiwi.segment_scores(texts, [], "ja", sources=[entry.source] * len(texts))
        assert close([scores["cometkiwi"] for _, scores in entry.hyps], own)
    chosen = (tmp_path / "rr/hyp/hyp.ja").read_text(encoding="utf-8").splitlines()
    for entry, line in zip(entries, chosen, strict=True):
        totals = [sum(weights[f] * s[f] for f in weights) for _, s in entry.hyps]
        assert line == entry.hyps[totals.index(max(totals))][0]
