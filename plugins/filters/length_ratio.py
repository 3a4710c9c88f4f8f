"""Length ratio between the two sides (NT5 §3.2: source/target length ratio above 6 removed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from mtcore.plugin import Filter, Pair, PluginConfig
from mtcore_plugins.filters.length import segment_length


class LengthRatioConfig(PluginConfig):
    unit: Literal["char", "word"] = Field("char", description="what a length counts")
    max_ratio: float = Field(6.0, gt=1, le=1000, description="largest longer/shorter ratio kept")


class LengthRatioFilter(Filter):
    """Score: longer side over shorter side (an empty side gives infinity)."""

    name = "length_ratio"
    Config = LengthRatioConfig

    def score(self, batch: Sequence[Pair]) -> list[float]:
        unit = self.config.unit
        scores = []
        for pair in batch:
            lengths = [segment_length(side, unit) for side in pair]
            low, high = min(lengths), max(lengths)
            scores.append(float("inf") if low == 0 else high / low)
        return scores

    def accept(self, score: float) -> bool:
        return score <= self.config.max_ratio
