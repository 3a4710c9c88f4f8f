"""scripts/stage_significance.py rebuilds each metric from the signature an evaluate step
recorded, so that its paired tests score what the recipe scored (a lowercased BLEU stays
lowercased). The full script runs on finished runs in test_recipes.py's end-to-end tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from sacrebleu.metrics import BLEU, CHRF

from tests.conftest import real_slice

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "stage_significance.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stage_significance", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "metric",
    [
        BLEU(tokenize="13a", lowercase=True),
        BLEU(tokenize="char"),
        BLEU(tokenize="zh", smooth_method="floor", smooth_value=0.2),
        BLEU(smooth_method="add-k"),
        CHRF(),
        CHRF(word_order=2, lowercase=True),
    ],
    ids=["bleu-13a-lc", "bleu-char", "bleu-zh-floor", "bleu-add-k", "chrf", "chrf++-lc"],
)
def test_metric_from_signature_scores_as_the_recorded_metric(
    metric: BLEU | CHRF, tmp_path: Path
) -> None:
    files = real_slice(tmp_path, "test", 200)
    lang = "ja" if getattr(metric, "tokenize", None) in ("char", "zh") else "en"
    refs = files[lang].read_text(encoding="utf-8").splitlines()
    # a system that differs from the references in case and in one word a sentence
    hyps = [line.capitalize().replace(" the ", " a ", 1) for line in refs]
    expected = metric.corpus_score(hyps, [refs]).score  # the signature needs a scored corpus
    signature = str(metric.get_signature())
    name = "BLEU" if isinstance(metric, BLEU) else "chrF"
    rebuilt = script().metric_from_signature(name, signature)
    assert rebuilt.corpus_score(hyps, [refs]).score == pytest.approx(expected)
    assert str(rebuilt.get_signature()) == signature


def test_lowercase_from_the_signature_changes_the_score(tmp_path: Path) -> None:
    refs = real_slice(tmp_path, "test", 200)["en"].read_text(encoding="utf-8").splitlines()
    hyps = [line.upper() for line in refs]
    rebuild = script().metric_from_signature
    cased = rebuild("BLEU", "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1")
    lowered = rebuild("BLEU", "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.5.1")
    assert lowered.corpus_score(hyps, [refs]).score == pytest.approx(100.0)
    assert cased.corpus_score(hyps, [refs]).score < 5.0


def test_a_metric_without_a_paired_test_is_refused() -> None:
    with pytest.raises(SystemExit, match="TER"):
        script().metric_from_signature("TER", "nrefs:1|case:lc|tok:tercom|version:2.5.1")
