"""A filter a recipe can use once this package is installed."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import Field

from mtcore.api import Filter, Pair, PluginConfig


class NumberMismatchConfig(PluginConfig):
    min_digits: int = Field(3, ge=1, le=20, description="numbers with fewer digits are ignored")


class NumberMismatchFilter(Filter[NumberMismatchConfig]):
    """Score: 1 when the multisets of long numbers differ between the sides, else 0."""

    name = "number_mismatch"

    def score(self, batch: Sequence[Pair]) -> list[int]:
        pattern = re.compile(rf"\d{{{self.config.min_digits},}}")
        return [
            int(len({tuple(sorted(pattern.findall(side))) for side in pair}) > 1) for pair in batch
        ]

    def accept(self, score: int) -> bool:
        return score == 0
