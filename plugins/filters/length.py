"""Segment length bounds on every side (NT5 §3.2: more than 500 characters removed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from mtcore.plugin import Filter, Pair, PluginConfig


def segment_length(text: str, unit: str) -> int:
    """``char`` counts characters; ``word`` whitespace tokens (the segmenter-aware counts for
    Japanese and Chinese come with the cleaning plugins)."""
    return len(text) if unit == "char" else len(text.split())


class LengthConfig(PluginConfig):
    unit: Literal["char", "word"] = Field("char", description="what a length counts")
    min_length: int = Field(1, ge=0, le=100_000, description="shortest side kept (inclusive)")
    max_length: int = Field(500, ge=1, le=10_000_000, description="longest side kept (inclusive)")


class LengthFilter(Filter):
    """Score: the length of each side; accept when every side is within [min, max]."""

    name = "length"
    Config = LengthConfig

    def score(self, batch: Sequence[Pair]) -> list[list[int]]:
        unit = self.config.unit
        return [[segment_length(side, unit) for side in pair] for pair in batch]

    def accept(self, score: list[int]) -> bool:
        return all(self.config.min_length <= n <= self.config.max_length for n in score)
