"""Length features: ``length_ratio`` (hypothesis length over source length) and
``word_penalty`` (minus the hypothesis' word count, Moses' WordPenalty: a positive weight
favours short output, a negative one long output). Words of Japanese and Chinese come from
their segmenters (MeCab, jieba), as the cleaning rules count them; ``char`` counts characters
without spaces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from mtcore.api import PluginConfig, Scorer


class LengthConfig(PluginConfig):
    unit: Literal["word", "char"] = Field(
        "word", description="word: segmenter words for ja/zh, whitespace words otherwise; char"
    )


def length(text: str, lang: str, unit: str) -> int:
    from mtcore_plugins.common.text.tokens import tokens

    if unit == "char":
        return sum(1 for c in text if not c.isspace())
    return len(tokens(text, lang)) if text.strip() else 0


class LengthRatioScorer(Scorer[LengthConfig]):
    """Score: len(hypothesis) / len(source), the source counted as at least 1."""

    name = "length_ratio"

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        unit = self.config.unit  # type: ignore[attr-defined]
        return [
            length(hyp, self.tgt, unit) / max(length(src, self.src, unit), 1) for src, hyp in pairs
        ]


class WordPenaltyScorer(Scorer[LengthConfig]):
    """Score: minus the number of words (or characters) of the hypothesis."""

    name = "word_penalty"

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        unit = self.config.unit  # type: ignore[attr-defined]
        return [-float(length(hyp, self.tgt, unit)) for _, hyp in pairs]
