"""Base of the filters written as array code over a :class:`mtcore.text.block.TextBlock`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from mtcore.api import ConfigT, Filter, Pair, TextBlock


class ArrayFilter(Filter[ConfigT]):
    """``score_block``/``accept_block`` are the real implementation; the per-pair ``score`` and
    ``accept`` run them on a one-off block, so both paths give identical decisions."""

    vectorized: ClassVar[bool] = True

    def score(self, batch: Sequence[Pair]) -> list[Any]:
        scores = np.asarray(self.score_block(TextBlock.from_pairs(batch, self.langs)))
        return scores.tolist()

    def accept(self, score: Any) -> bool:
        return bool(self.accept_block(np.asarray([score]))[0])
