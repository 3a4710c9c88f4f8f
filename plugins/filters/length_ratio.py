"""Length ratio between the sides (NT5 §3.2: character ratio above 6 and word ratio above 4
removed; Yishu §2.1.1: token ratio above 3; Xiaomi §2.2.1: length ratio above 4).

The score is OpusFilter's ``LengthRatioFilter`` score: longest side over shortest, infinity
when only the shortest is empty, 0 when every side is empty. OpusFilter keeps ``score <
threshold``; the papers remove ratios *above* the limit, so ``inclusive`` (the default) keeps a
ratio equal to ``max_ratio`` and ``inclusive: false`` reproduces OpusFilter."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from mtcore.api import PluginConfig, TextBlock
from mtcore_plugins.filters._array import ArrayFilter
from mtcore_plugins.filters.length import Unit, block_lengths, needs_segmenter


class LengthRatioConfig(PluginConfig):
    unit: Unit = Field("char", description="what a length counts: char, word or token")
    max_ratio: float = Field(6.0, gt=1, le=1000, description="largest longer/shorter ratio kept")
    inclusive: bool = Field(True, description="keep a ratio equal to max_ratio")


class LengthRatioFilter(ArrayFilter[LengthRatioConfig]):
    """Score: longer side over shorter side."""

    name = "length_ratio"
    higher_is_better = False

    def whole_blocks(self) -> bool:
        # Segmenting is Python per line: score only the pairs still alive.
        return not needs_segmenter(self.config.unit, self.langs)

    def score_block(self, block: TextBlock) -> np.ndarray:
        lengths = block_lengths(block, self.config.unit)
        if not lengths.size:
            return np.zeros(len(block))
        low, high = lengths.min(axis=1), lengths.max(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = high / low
        ratio[low == 0] = np.inf
        ratio[high == 0] = 0.0
        return ratio

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        scores = np.asarray(scores, dtype=np.float64)
        if self.config.inclusive:
            return scores <= self.config.max_ratio
        return scores < self.config.max_ratio
