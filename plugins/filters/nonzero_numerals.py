"""Agreement of the numerals of the two sides, zeros removed (Vázquez et al. 2019; OpusFilter's
``NonZeroNumeralsFilter``): ``difflib.SequenceMatcher(None, a, b).ratio()`` of the sequences
of digits 1-9, kept when at least the threshold.

Most pairs have no digits or the same digits on both sides (ratio 1) or digits on one side
only (ratio 0); array code settles those for a whole shard and ``difflib`` runs on the rest."""

from __future__ import annotations

import difflib

import numba
import numpy as np
from pydantic import Field

from mtcore.api import PluginConfig, PluginError, TextBlock, TextColumn
from mtcore_plugins.filters._array import ArrayFilter

DIGITS = "123456789"


def digit_streams(column: TextColumn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ASCII digits 1-9 of the column in order, and per line their count and offset."""
    counts = column.count_chars(DIGITS)
    digits = _digits(column.codes, column.starts, column.ends, counts)
    offsets = np.zeros(column.count, dtype=np.int64)
    offsets[1:] = np.cumsum(counts)[:-1]
    return digits, counts, offsets


@numba.njit(cache=True, nogil=True)
def _digits(
    codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray
) -> np.ndarray:  # pragma: no cover (compiled)
    """The digits 1-9 of the lines, read from the lines that have any (``counts``, from the
    pass that decoded the column)."""
    digits = np.empty(counts.sum(), dtype=np.int64)
    at = 0
    for line in range(len(starts)):
        if counts[line]:
            for x in range(starts[line], ends[line]):
                if 49 <= codes[x] <= 57:
                    digits[at] = codes[x] - 48
                    at += 1
    return digits


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
    rest = both[~identical[both]]
    ratio[rest] = _ratios(da, oa, ca, db, ob, cb, rest)
    for row in rest[cb[rest] >= AUTOJUNK]:  # difflib's popular-element heuristic: its own code
        seq_a = da[oa[row] : oa[row] + ca[row]].tolist()
        seq_b = db[ob[row] : ob[row] + cb[row]].tolist()
        ratio[row] = difflib.SequenceMatcher(None, seq_a, seq_b).ratio()
    return ratio


AUTOJUNK = 200
"""From this length of the second sequence on, ``difflib.SequenceMatcher`` treats elements
that make up over 1 % of it as junk; below it, :func:`_matched` is its exact equal."""


@numba.njit(cache=True, nogil=True)
def _matched(a: np.ndarray, b: np.ndarray) -> int:  # pragma: no cover (compiled)
    """``sum(size for *_, size in SequenceMatcher(None, a, b).get_matching_blocks())`` for
    ``len(b) < 200`` (no junk): the longest match of a range, leftmost in ``a`` then in ``b``
    among the longest, then both sides of it, as ``get_matching_blocks`` recurses."""
    total = 0
    stack = [(0, len(a), 0, len(b))]
    run = np.zeros(len(b) + 1, dtype=np.int64)
    new = np.zeros(len(b) + 1, dtype=np.int64)
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        best_i, best_j, best = alo, blo, 0
        run[:] = 0
        for i in range(alo, ahi):
            new[:] = 0
            for j in range(blo, bhi):
                if a[i] == b[j]:
                    k = (run[j] if j > blo else 0) + 1
                    new[j + 1] = k
                    if k > best:
                        best_i, best_j, best = i - k + 1, j - k + 1, k
            run, new = new, run
        if best:
            total += best
            if alo < best_i and blo < best_j:
                stack.append((alo, best_i, blo, best_j))
            if best_i + best < ahi and best_j + best < bhi:
                stack.append((best_i + best, ahi, best_j + best, bhi))
    return total


@numba.njit(cache=True, nogil=True)
def _ratios(
    da: np.ndarray,
    oa: np.ndarray,
    ca: np.ndarray,
    db: np.ndarray,
    ob: np.ndarray,
    cb: np.ndarray,
    rows: np.ndarray,
) -> np.ndarray:  # pragma: no cover (compiled)
    """``SequenceMatcher(None, a, b).ratio()`` of each row's digit sequences (rows whose
    second sequence reaches AUTOJUNK are left to difflib by the caller)."""
    out = np.zeros(len(rows), dtype=np.float64)
    for n in range(len(rows)):
        row = rows[n]
        a = da[oa[row] : oa[row] + ca[row]]
        b = db[ob[row] : ob[row] + cb[row]]
        if len(b) < 200:
            out[n] = 2.0 * _matched(a, b) / (len(a) + len(b))
    return out


class NonZeroNumeralsConfig(PluginConfig):
    threshold: float = Field(0.5, ge=0, le=1, description="lowest similarity kept")


class NonZeroNumeralsFilter(ArrayFilter[NonZeroNumeralsConfig]):
    name = "nonzero_numerals"
    higher_is_better = True
    char_classes = (DIGITS,)

    def setup(self, langs: tuple[str, ...], resources: object = None) -> None:
        if len(langs) != 2:
            raise PluginError("nonzero_numerals needs a corpus of exactly two languages")
        super().setup(langs, resources)

    def score_block(self, block: TextBlock) -> np.ndarray:
        return numeral_ratios(*block.columns)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores, dtype=np.float64) >= self.config.threshold
