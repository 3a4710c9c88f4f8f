"""Corpus BLEU through sacrebleu, with the tokenizer chosen by target language."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from mtcore.metrics import Score
from mtcore.plugin import Metric, PluginConfig

Tokenizer = Literal[
    "auto", "13a", "intl", "zh", "ja-mecab", "ko-mecab", "char", "flores200", "none"
]
# sacrebleu's own recommendation per target language; WMT's official En-Ja tables use "char".
AUTO_TOKENIZER = {"ja": "ja-mecab", "zh": "zh", "ko": "ko-mecab"}


def auto_tokenizer(tokenize: str, lang: str) -> str:
    return AUTO_TOKENIZER.get(lang, "13a") if tokenize == "auto" else tokenize


class BleuConfig(PluginConfig):
    tokenize: Tokenizer = Field("auto", description="sacrebleu tokenizer; auto picks by language")
    lowercase: bool = Field(False, description="case-insensitive BLEU")
    smooth_method: Literal["exp", "floor", "add-k", "none"] = Field(
        "exp", description="sacrebleu smoothing"
    )


class BleuMetric(Metric):
    name = "bleu"
    Config = BleuConfig

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        from sacrebleu.metrics import BLEU

        metric = BLEU(
            tokenize=auto_tokenizer(self.config.tokenize, lang),
            lowercase=self.config.lowercase,
            smooth_method=self.config.smooth_method,
            trg_lang=lang,
        )
        result = metric.corpus_score(list(hyps), [list(r) for r in refs])
        details = {
            "precisions": [round(p, 4) for p in result.precisions],
            "bp": round(result.bp, 4),
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
        return Score("BLEU", round(result.score, 4), str(metric.get_signature()), details)
