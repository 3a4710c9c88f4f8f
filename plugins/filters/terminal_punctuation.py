"""Co-occurrence of terminal punctuation (Vázquez et al. 2019; OpusFilter's
``TerminalPunctuationFilter``): penalty ``|s - t| + max(s - 1, 0) + max(t - 1, 0)`` over the
counts of ``. ? ! …`` on the two sides, score ``-log(penalty + 1)``, kept when at least the
threshold (OpusFilter's default -2)."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from mtcore.api import PluginConfig, PluginError, TextBlock
from mtcore_plugins.filters._array import ArrayFilter

MARKS = ".?!…"


class TerminalPunctuationConfig(PluginConfig):
    threshold: float = Field(-2.0, le=0, description="lowest score kept")


class TerminalPunctuationFilter(ArrayFilter[TerminalPunctuationConfig]):
    name = "terminal_punctuation"
    higher_is_better = True
    char_classes = (MARKS,)

    def setup(self, langs: tuple[str, ...], resources: object = None) -> None:
        if len(langs) != 2:
            raise PluginError("terminal_punctuation needs a corpus of exactly two languages")
        super().setup(langs, resources)

    def score_block(self, block: TextBlock) -> np.ndarray:
        s, t = (c.count_chars(MARKS) for c in block.columns)
        penalty = np.abs(s - t) + np.maximum(s - 1, 0) + np.maximum(t - 1, 0)
        # math.log, not np.log: the scores are OpusFilter's to the last bit.
        top = int(penalty.max(initial=0))
        table = np.array([-math.log(v + 1) for v in range(top + 1)], dtype=np.float64)
        return table[penalty]

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores, dtype=np.float64) >= self.config.threshold
