"""Corpus chrF (chrF++ with word_order 2) through sacrebleu."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from mtcore.api import Metric, PluginConfig, Score


class ChrfConfig(PluginConfig):
    char_order: int = Field(6, ge=1, le=10, description="character n-gram order")
    word_order: int = Field(0, ge=0, le=4, description="word n-gram order (2 gives chrF++)")
    beta: int = Field(2, ge=1, le=10, description="recall weight")
    lowercase: bool = Field(False, description="case-insensitive")


class ChrfMetric(Metric[ChrfConfig]):
    name = "chrf"

    @property
    def score_name(self) -> str:
        return "chrF++" if self.config.word_order else "chrF"

    def sacrebleu(self, lang: str) -> Any:
        """The sacrebleu CHRF this metric scores with (for paired significance tests)."""
        from sacrebleu.metrics import CHRF

        cfg = self.config
        return CHRF(
            char_order=cfg.char_order,
            word_order=cfg.word_order,
            beta=cfg.beta,
            lowercase=cfg.lowercase,
        )

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        metric = self.sacrebleu(lang)
        result = metric.corpus_score(list(hyps), [list(r) for r in refs])
        return Score(self.score_name, round(result.score, 4), str(metric.get_signature()))
