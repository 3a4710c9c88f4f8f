"""Corpus BLEU through sacrebleu, with the tokenizer chosen by target language.

Several references are scored together (sacrebleu's multi-reference BLEU: n-gram counts clipped
by the maximum over the references, the closest reference length per segment), as the
``bleu-all`` column of the official WMT tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from mtcore.metrics import Score
from mtcore.plugin import Metric, PluginConfig

Tokenizer = Literal[
    "auto", "wmt", "13a", "intl", "zh", "ja-mecab", "ko-mecab", "char", "flores200", "none"
]
# sacrebleu's own recommendation per target language.
AUTO_TOKENIZER = {"ja": "ja-mecab", "zh": "zh", "ko": "ko-mecab"}
# The official WMT22 and WMT23 automatic tables (wmt22/wmt23-news-systems
# scores/automatic-scores.tsv): character BLEU into Japanese, sacrebleu's zh tokenizer into
# Chinese, 13a otherwise. tests/test_wmt_scores.py reproduces every team's score with these.
WMT_TOKENIZER = {"ja": "char", "zh": "zh"}


def base_lang(lang: str) -> str:
    """``ja`` for ``ja``, ``ja-JP``, ``zh_Hans``."""
    return lang.replace("_", "-").split("-", 1)[0].lower()


def auto_tokenizer(tokenize: str, lang: str) -> str:
    """The sacrebleu tokenizer that ``tokenize`` means for target language ``lang``."""
    if tokenize == "auto":
        return AUTO_TOKENIZER.get(base_lang(lang), "13a")
    if tokenize == "wmt":
        return WMT_TOKENIZER.get(base_lang(lang), "13a")
    return tokenize


class BleuConfig(PluginConfig):
    tokenize: Tokenizer = Field(
        "auto",
        description="sacrebleu tokenizer; auto: sacrebleu's choice by language (ja-mecab, zh, "
        "ko-mecab, else 13a); wmt: the official WMT22/23 tables' choice (char into Japanese, "
        "zh into Chinese, else 13a)",
    )
    lowercase: bool = Field(False, description="case-insensitive BLEU")
    smooth_method: Literal["exp", "floor", "add-k", "none"] = Field(
        "exp", description="sacrebleu smoothing"
    )


class BleuMetric(Metric):
    name = "bleu"
    Config = BleuConfig
    config: BleuConfig

    score_name = "BLEU"

    def sacrebleu(self, lang: str) -> Any:
        """The sacrebleu BLEU this metric scores ``lang`` with (for paired significance tests)."""
        from sacrebleu.metrics import BLEU

        return BLEU(
            tokenize=auto_tokenizer(self.config.tokenize, lang),
            lowercase=self.config.lowercase,
            smooth_method=self.config.smooth_method,
        )  # no trg_lang: the tokenizer is explicit, and it only adds "consider ja-mecab" warnings

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        metric = self.sacrebleu(lang)
        result = metric.corpus_score(list(hyps), [list(r) for r in refs])
        details = {
            "precisions": [round(p, 4) for p in result.precisions],
            "bp": round(result.bp, 4),
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
        return Score("BLEU", round(result.score, 4), str(metric.get_signature()), details)
