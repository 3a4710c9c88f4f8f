"""Agreement of the numerals of the two sides, zeros removed (Vázquez et al. 2019; OpusFilter's
``NonZeroNumeralsFilter``): ``difflib.SequenceMatcher(None, a, b).ratio()`` of the sequences
of digits 1-9, kept when at least the threshold.

Most pairs have no digits or the same digits on both sides (ratio 1) or digits on one side
only (ratio 0); array code settles those for a whole shard and ``difflib`` runs on the rest."""

from __future__ import annotations

import difflib

import numpy as np
from pydantic import Field

from mtcore.errors import PluginError
from mtcore.plugin import PluginConfig
from mtcore.textblock import TextBlock, TextColumn, code_table
from mtcore_plugins.filters._array import ArrayFilter

DIGITS = code_table("123456789")


def digit_streams(column: TextColumn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ASCII digits 1-9 of the column in order, and per line their count and offset."""
    codes = column.codes
    counts = column.count_codes(DIGITS)
    digits = codes[(codes >= 49) & (codes <= 57)] - 48 if counts.any() else codes[:0]
    offsets = np.zeros(column.count, dtype=np.int64)
    offsets[1:] = np.cumsum(counts)[:-1]
    return digits, counts, offsets


def numeral_ratios(a: TextColumn, b: TextColumn) -> np.ndarray:
    da, ca, oa = digit_streams(a)
    db, cb, ob = digit_streams(b)
    ratio = np.ones(a.count, dtype=np.float64)
    ratio[(ca == 0) != (cb == 0)] = 0.0
    both = np.flatnonzero((ca > 0) & (cb > 0))
    if not len(both):
        return ratio
    same_len = both[ca[both] == cb[both]]
    identical = np.zeros(a.count, dtype=bool)
    if len(same_len):
        lengths = ca[same_len]
        total = int(lengths.sum())
        first = np.zeros(len(same_len), dtype=np.int64)
        first[1:] = np.cumsum(lengths)[:-1]
        within = np.arange(total) - np.repeat(first, lengths)
        equal = (
            da[np.repeat(oa[same_len], lengths) + within]
            == db[np.repeat(ob[same_len], lengths) + within]
        )
        mismatches = np.add.reduceat((~equal).astype(np.int64), first)
        identical[same_len[mismatches == 0]] = True
    for row in both[~identical[both]]:
        seq_a = da[oa[row] : oa[row] + ca[row]].tolist()
        seq_b = db[ob[row] : ob[row] + cb[row]].tolist()
        ratio[row] = difflib.SequenceMatcher(None, seq_a, seq_b).ratio()
    return ratio


class NonZeroNumeralsConfig(PluginConfig):
    threshold: float = Field(0.5, ge=0, le=1, description="lowest similarity kept")


class NonZeroNumeralsFilter(ArrayFilter):
    name = "nonzero_numerals"
    Config = NonZeroNumeralsConfig
    higher_is_better = True

    def setup(self, langs: tuple[str, ...], resources: object = None) -> None:
        if len(langs) != 2:
            raise PluginError("nonzero_numerals needs a corpus of exactly two languages")
        super().setup(langs, resources)

    def score_block(self, block: TextBlock) -> np.ndarray:
        return numeral_ratios(*block.columns)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores, dtype=np.float64) >= self.config.threshold
