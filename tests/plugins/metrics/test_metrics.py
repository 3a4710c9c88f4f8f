"""Metric plugins on real WMT22 outputs: BLEU tokenizers and several references, chrF++,
sentence BLEU and its statistics, TER, and COMET's error paths (unbabel-comet is not a
dependency)."""

# ruff: noqa: RUF001 (a Chinese test line)

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

from mtcore.contracts.errors import DataError, PluginError, RecipeError
from mtcore.recipe.load import build_recipe
from mtcore_plugins.common.neural_metrics import comet as comet_models
from mtcore_plugins.metrics.comet import CometConfig, CometMetric
from mtcore_plugins.metrics.sentence_bleu import sentence_bleu
from tests.support.data import SHARED

WMT22 = "wmt-conference+wmt22-news-systems/txt"


def need(path: Path) -> Path:
    if not path.exists():
        if os.environ.get("CI"):  # CI always has ../shared: a missing path is a bug, not a skip
            pytest.fail(f"real data not found at {path}")
        pytest.skip(f"real data not found at {path}")
    return path


@functools.cache
def wmt22(pair: str, kind: str, name: str, n: int) -> list[str]:
    """The first ``n`` segments of a WMT22 file: kind ``hyp`` (a team) or ``ref`` (A, B)."""
    lang = pair.split("-")[1]
    folder = "system-outputs" if kind == "hyp" else "references"
    path = need(SHARED / pair / WMT22 / folder / f"generaltest2022.{pair}.{kind}.{name}.{lang}")
    with open(path, encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(n)]


def metric(registry, name: str, **config):
    return registry.load("metrics", name).from_dict(config)


@pytest.mark.parametrize(
    ("tokenize", "lang", "expected"),
    [
        ("auto", "ja", "ja-mecab"),  # sacrebleu's recommendation for Japanese
        ("auto", "zh", "zh"),  # ... and for Chinese
        ("auto", "en", "13a"),  # everything else: WMT's default
        ("auto", "ja-JP", "ja-mecab"),  # a region suffix still picks by language
        ("wmt", "ja", "char"),  # the official WMT22/23 En→Ja tables are character BLEU
        ("wmt", "zh_Hans", "zh"),  # a script suffix still picks by language
        ("wmt", "cs", "13a"),  # WMT's 13a for the rest
        ("char", "zh", "char"),  # an explicit tokenizer wins over the language
        ("intl", "en", "intl"),  # the international (Unicode punctuation) tokenizer
        ("none", "en", "none"),  # pre-tokenized input scored as is
    ],
)
def test_bleu_tokenizer_choice_is_in_the_signature(registry, tokenize, lang, expected):
    # a line of the language with four-grams under every tokenizer: identical pairs score 100
    line = {"ja": "今日はとても良い天気ですね。", "zh": "今天天气很好，我们去公园散步吧。"}.get(
        lang[:2], "a b c d e"
    )
    score = metric(registry, "bleu", tokenize=tokenize).corpus_score([line], [[line]], lang)
    assert f"|tok:{expected}|" in score.signature.replace("-0.996-IPA", "")  # MeCab version
    assert score.score == 100.0


def test_bleu_several_references_is_sacrebleus_multi_reference_bleu(registry):
    """WMT's bleu-all: both zh-en references at once (n-gram clipping by the max over refs)."""
    hyps = wmt22("zh-en", "hyp", "HuaweiTSC", 300)
    refs = [wmt22("zh-en", "ref", "A", 300), wmt22("zh-en", "ref", "B", 300)]
    both = metric(registry, "bleu").corpus_score(hyps, refs, "en")
    assert both.signature.startswith("nrefs:2|")
    assert both.score == pytest.approx(sacrebleu.corpus_bleu(hyps, refs).score, abs=1e-4)
    singles = [metric(registry, "bleu").corpus_score(hyps, [r], "en").score for r in refs]
    assert both.score > max(singles)  # a second reference can only add matches here


def test_chrf_plus_plus_is_word_order_two(registry):
    hyps, refs = wmt22("ja-en", "hyp", "NT5", 200), [wmt22("ja-en", "ref", "A", 200)]
    plus = metric(registry, "chrf", word_order=2).corpus_score(hyps, refs, "en")
    assert plus.metric == "chrF++" and "|nw:2|" in plus.signature
    expected = sacrebleu.metrics.CHRF(word_order=2).corpus_score(hyps, refs).score
    assert plus.score == pytest.approx(expected, abs=1e-4)
    plain = metric(registry, "chrf").corpus_score(hyps, refs, "en")
    assert plain.metric == "chrF" and "|nw:0|" in plain.signature


def test_sentence_bleu_equals_sacrebleu_per_segment():
    hyps, ref = wmt22("ja-en", "hyp", "NT5", 120), wmt22("ja-en", "ref", "A", 120)
    ours = sentence_bleu(hyps, [ref], "en")
    theirs = [sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(hyps, ref, strict=True)]
    assert ours == pytest.approx(theirs, abs=1e-9)
    assert len(set(ours)) > 50  # real segments: the scores differ, the check is not vacuous


def test_summed_segment_statistics_give_corpus_bleu(registry):
    """What MERT relies on: corpus BLEU of any selection is the metric's score of its summed
    segment statistics, for a real system's unsegmented Japanese."""
    hyps, ref = wmt22("en-ja", "hyp", "NT5", 200), wmt22("en-ja", "ref", "A", 200)
    bleu = metric(registry, "bleu", tokenize="wmt")
    stats = bleu.segment_statistics(hyps, [ref], "ja")
    assert stats.shape == (200, 10) and stats.dtype == np.int64
    whole = bleu.corpus_score(hyps, [ref], "ja").score
    assert bleu.score_statistics(stats.sum(axis=0)[None])[0] == pytest.approx(whole, abs=1e-4)
    chosen = np.arange(0, 200, 3)  # an arbitrary selection of segments
    subset = bleu.corpus_score([hyps[i] for i in chosen], [[ref[i] for i in chosen]], "ja")
    assert bleu.score_statistics(stats[chosen].sum(axis=0)[None])[0] == pytest.approx(
        subset.score, abs=1e-4
    )
    # floor smoothing goes through sacrebleu's own arithmetic, not the compiled exp path
    floor = metric(registry, "bleu", tokenize="wmt", smooth_method="floor")
    expected = floor.corpus_score(hyps[:5], [ref[:5]], "ja").score
    assert floor.score_statistics(stats[:5].sum(axis=0)[None])[0] == pytest.approx(expected, 1e-4)


def test_segment_statistics_of_an_nbest_read_one_reference_segment_each(registry):
    """Several hypotheses of one sentence are scored against that sentence's reference: the
    same rows as scoring each against a repeated reference."""
    hyps, ref = wmt22("ja-en", "hyp", "NT5", 20), wmt22("ja-en", "ref", "A", 20)
    bleu = metric(registry, "bleu")
    texts = [h for h in hyps for _ in range(3)]
    of = [s for s in range(20) for _ in range(3)]
    repeated = bleu.segment_statistics(texts, [[r for r in ref for _ in range(3)]], "en")
    assert (bleu.segment_statistics(texts, [ref], "en", of) == repeated).all()
    with pytest.raises(DataError, match="each hypothesis needs a reference segment"):
        bleu.segment_statistics(texts, [ref], "en", [25] * len(texts))


def test_a_metric_without_statistics_says_so(registry):
    with pytest.raises(PluginError, match="metric 'chrf' has no segment statistics"):
        metric(registry, "chrf").segment_statistics(["a"], [["a"]], "en")


def test_sentence_bleu_metric_reports_the_mean(registry):
    hyps, ref = wmt22("ja-en", "hyp", "NT5", 60), wmt22("ja-en", "ref", "A", 60)
    plugin = metric(registry, "sentence_bleu")
    score = plugin.corpus_score(hyps, [ref], "en")
    per_segment = plugin.segment_scores(hyps, [ref], "en")
    assert score.metric == "sentBLEU" and "|eff:yes|" in score.signature
    assert score.score == pytest.approx(sum(per_segment) / 60, abs=1e-4)
    assert score.details == {"segments": 60}


@pytest.mark.parametrize(
    ("hyps", "refs", "message"),
    [
        (["a", "b"], [["a"]], "reference stream 0 has 1 segments but there are 2"),  # misaligned
        (["a"], [], "at least one reference stream"),  # nothing to compare with
    ],
)
def test_sentence_bleu_rejects_misaligned_input(hyps, refs, message):
    with pytest.raises(DataError, match=message):
        sentence_bleu(hyps, refs, "en")


def test_ter_equals_sacrebleu_and_keeps_its_counts(registry):
    hyps, refs = wmt22("ja-en", "hyp", "NT5", 40), [wmt22("ja-en", "ref", "A", 40)]
    score = metric(registry, "ter").corpus_score(hyps, refs, "en")
    expected = sacrebleu.metrics.TER().corpus_score(hyps, refs)
    assert score.metric == "TER" and "|tok:tercom|" in score.signature
    assert score.score == pytest.approx(expected.score, abs=1e-4)
    assert score.score == pytest.approx(
        100 * score.details["edits"] / score.details["ref_length"], abs=1e-3
    )
    cased = metric(registry, "ter", case_sensitive=True).corpus_score(hyps, refs, "en")
    assert "|case:mixed|" in cased.signature and cased.score >= score.score


# --- COMET: optional, from a local path only ------------------------------------------------


def test_comet_needs_an_existing_model_path(tmp_path):
    with pytest.raises(ValueError, match="does not exist: give a local model.ckpt"):
        CometConfig(model=str(tmp_path / "wmt22-comet-da"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="without checkpoints/model.ckpt"):
        CometConfig(model=str(tmp_path / "empty"))


def test_comet_without_the_package_fails_at_validation(tmp_path, registry, monkeypatch):
    """The recipe is refused before any step runs, at the metric's location."""
    monkeypatch.setattr(comet_models, "comet_installed", lambda: False)
    checkpoint = tmp_path / "wmt22-comet-da" / "checkpoints" / "model.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"not a real checkpoint")
    with pytest.raises(ValueError, match="needs the unbabel-comet package"):
        CometConfig(model=str(checkpoint.parents[1]))
    doc = {
        "name": "comet",
        "directions": ["en-ja"],
        "data": {
            "hyp": {"source": "local", "files": {"ja": str(checkpoint)}},
            "ref": {"source": "local", "files": {"en": str(checkpoint), "ja": str(checkpoint)}},
        },
        "steps": {
            "evaluate": {
                "kind": "evaluate",
                "inputs": {"hyp": "hyp", "ref": "ref"},
                "metrics": [{"name": "comet", "model": str(checkpoint)}],
            }
        },
    }
    with pytest.raises(RecipeError) as err:
        build_recipe(doc, registry)
    assert "steps.evaluate.metrics.0.model" in str(err.value)
    assert "pip install unbabel-comet" in str(err.value)


def test_comet_needs_the_sources(tmp_path):
    # model_construct skips the validators: this checks the scoring-time guard on its own.
    plugin = CometMetric(CometConfig.model_construct(model=str(tmp_path), batch_size=8))
    with pytest.raises(PluginError, match=r"\(source, hypothesis, reference\) triples"):
        plugin.corpus_score(["a"], [["a"]], "en")
    with pytest.raises(DataError, match="2 source segments for 1 hypotheses"):
        plugin.corpus_score(["a"], [["a"]], "en", sources=["x", "y"])
