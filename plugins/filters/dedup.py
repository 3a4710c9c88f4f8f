"""Duplicate removal over the whole corpus (NT5 §3.2, Xiaomi §2.2.1, HW-TSC §2.2).

Workers hash each pair's key (128-bit BLAKE2b); the driver keeps the set of keys seen so far as
sorted NumPy runs merged log-structured, 16 bytes a key (a Python set of digests costs about
six times that), and marks a pair as a duplicate when its key is already there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal, cast

import numpy as np
from pydantic import Field

from mtcore.api import Filter, Pair, PluginConfig
from mtcore_plugins.common.text.keys import block_keys, pair_keys


class KeySet:
    """A set of 128-bit keys: runs sorted by their high word (the low word is checked within
    equal high words, which are rare), merged when a run is not much smaller than the one
    before it, so there are O(log n) runs and a merge never needs an index array."""

    def __init__(self) -> None:
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []

    def __len__(self) -> int:
        return sum(len(hi) for hi, _ in self.runs)

    @property
    def nbytes(self) -> int:
        return sum(hi.nbytes + lo.nbytes for hi, lo in self.runs)

    def check_and_add(self, keys: np.ndarray) -> np.ndarray:
        """For each key in order: was it in the set (or earlier in ``keys``)? Adds them all."""
        n = len(keys)
        seen = np.zeros(n, dtype=bool)
        if not n:
            return seen
        hi, lo = keys[:, 0], keys[:, 1]
        order = np.lexsort((np.arange(n), lo, hi))
        repeat = np.zeros(n, dtype=bool)
        repeat[1:] = (hi[order][1:] == hi[order][:-1]) & (lo[order][1:] == lo[order][:-1])
        seen[order[repeat]] = True
        first = order[~repeat]  # unique keys of this batch, sorted
        for run_hi, run_lo in self.runs:
            seen[first] |= _member(run_hi, run_lo, hi[first], lo[first])
        new = first[~seen[first]]
        if len(new):
            self.runs.append((hi[new].copy(), lo[new].copy()))
            while len(self.runs) > 1 and len(self.runs[-2][0]) < 2 * len(self.runs[-1][0]):
                b_hi, b_lo = self.runs.pop()
                a_hi, a_lo = self.runs.pop()
                at = np.searchsorted(a_hi, b_hi)
                a_hi = np.insert(a_hi, at, b_hi)  # one column at a time: less peak memory
                a_lo = np.insert(a_lo, at, b_lo)
                self.runs.append((a_hi, a_lo))
        return seen


def _member(run_hi: np.ndarray, run_lo: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    at = np.searchsorted(run_hi, hi, side="left")
    clipped = np.minimum(at, len(run_hi) - 1)
    same_hi = (at < len(run_hi)) & (run_hi[clipped] == hi)
    found = same_hi & (run_lo[clipped] == lo)
    # Keys sharing the high word but not the first low word: scan that (tiny) range.
    for i in np.flatnonzero(same_hi & ~found):
        j = int(at[i])
        while j < len(run_hi) and run_hi[j] == hi[i]:
            if run_lo[j] == lo[i]:
                found[i] = True
                break
            j += 1
    return found


class DedupConfig(PluginConfig):
    key: Literal["pair", "source", "target"] = Field(
        "pair", description="what must be unique: the whole pair, or one side"
    )
    normalize: bool = Field(False, description="compare case-folded text with whitespace collapsed")


class DedupFilter(Filter[DedupConfig]):
    """Score: 1 for a segment whose key was seen earlier in the corpus, else 0. Stateful: the
    driver feeds it the whole corpus in order, so the first copy is kept."""

    name = "dedup"
    stateful: ClassVar[bool] = True

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        super().setup(langs, resources)
        self.seen = KeySet()

    def prepare_block(self, block: Any) -> np.ndarray:
        return block_keys(block, self.config.key, self.config.normalize)

    def score(self, batch: Sequence[Pair] | np.ndarray) -> list[int]:
        keys = (
            batch
            if isinstance(batch, np.ndarray)
            else pair_keys(batch, self.config.key, self.config.normalize)
        )
        return cast(list[int], self.seen.check_and_add(keys).astype(np.int8).tolist())

    def accept(self, score: int) -> bool:
        return score == 0

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores) == 0
