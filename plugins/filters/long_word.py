"""Overlong words (NT5 §3.2: a word of more than 40 characters removed; OpusFilter's
``LongWordFilter`` with ``threshold`` T is ``max_chars: T - 1``)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from mtcore.plugin import PluginConfig
from mtcore.textblock import TextBlock
from mtcore_plugins.filters._array import ArrayFilter


class LongWordConfig(PluginConfig):
    max_chars: int = Field(40, ge=1, le=1_000_000, description="longest word kept (inclusive)")


class LongWordFilter(ArrayFilter):
    """Score: the longest whitespace-separated word of each side, in characters."""

    name = "long_word"
    Config = LongWordConfig
    higher_is_better = False

    def score_block(self, block: TextBlock) -> np.ndarray:
        return np.stack([c.longest_word for c in block.columns], axis=1)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        scores = np.asarray(scores).reshape(len(scores), -1)
        return (scores <= self.config.max_chars).all(axis=1)
