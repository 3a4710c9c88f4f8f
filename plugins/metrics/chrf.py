"""Corpus chrF (chrF++ with word_order 2) through sacrebleu."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from mtcore.metrics import Score
from mtcore.plugin import Metric, PluginConfig


class ChrfConfig(PluginConfig):
    char_order: int = Field(6, ge=1, le=10, description="character n-gram order")
    word_order: int = Field(0, ge=0, le=4, description="word n-gram order (2 gives chrF++)")
    beta: int = Field(2, ge=1, le=10, description="recall weight")
    lowercase: bool = Field(False, description="case-insensitive")


class ChrfMetric(Metric):
    name = "chrf"
    Config = ChrfConfig
    config: ChrfConfig

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        from sacrebleu.metrics import CHRF

        cfg = self.config
        metric = CHRF(
            char_order=cfg.char_order,
            word_order=cfg.word_order,
            beta=cfg.beta,
            lowercase=cfg.lowercase,
        )
        result = metric.corpus_score(list(hyps), [list(r) for r in refs])
        name = "chrF++" if cfg.word_order else "chrF"
        return Score(name, round(result.score, 4), str(metric.get_signature()))
