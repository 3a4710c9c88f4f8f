"""Repeated content (OpusFilter's ``RepetitionFilter``): a substring of ``min_length`` to
``max_length + 1`` characters, starting with a non-space, repeated at least ``threshold`` more
times in a row with optional spaces between, as the regex
``(\\S.{min-1,max}?)(?: *\\1){threshold,}``. Score: the number of repetitions of the first
match (0 if none), the maximum over the sides; kept when below the threshold.

That backtracking regex is most of OpusFilter's running time. Here a compiled scan over the
shard's code points finds the lines that can match (it checks the same repeats, except that it
lets any non-space character start a unit, so it finds a superset) and the regex runs on those
lines only, giving the regex's own answer."""

from __future__ import annotations

import numba
import numpy as np
import regex
from pydantic import Field, model_validator

from mtcore.plugin import PluginConfig
from mtcore.textblock import TextBlock, TextColumn
from mtcore_plugins.filters._array import ArrayFilter

SPACE = 32


@numba.njit(cache=True, nogil=True)
def _repeats_at(codes: np.ndarray, i: int, size: int, k: int, end: int, threshold: int) -> bool:
    """Whether ``codes[i:i+size]`` recurs ``threshold`` times in a row from ``k`` on, with
    spaces skipped before each recurrence (``(?: *\\1){threshold,}``)."""
    repeats = 0
    while True:
        if k + size > end:
            return False
        for t in range(size):
            if codes[k + t] != codes[i + t]:
                return False
        repeats += 1
        if repeats >= threshold:
            return True
        k += size
        while k < end and codes[k] == SPACE:
            k += 1


@numba.njit(cache=True, nogil=True)
def _candidates(
    codes: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    min_len: int,
    max_len: int,
    threshold: int,
) -> np.ndarray:  # pragma: no cover (compiled)
    """Per line: could the repetition regex match? A unit's first recurrence ``k`` starts with
    the unit's first ``gram`` characters (two when units have at least two), so for each start
    ``i`` only the positions holding the same gram are tried, following a chain of next
    occurrences built per line with a small hash table, each with every unit size that puts
    ``k`` right after the unit and its trailing spaces."""
    out = np.zeros(len(starts), dtype=np.bool_)
    if not len(starts):
        return out
    gram = 2 if min_len >= 2 else 1
    longest = 1
    for line in range(len(starts)):
        longest = max(longest, ends[line] - starts[line])
    cap = 16
    while cap < 2 * longest + 2:
        cap *= 2
    table_key = np.zeros(cap, dtype=np.int64)
    table_pos = np.zeros(cap, dtype=np.int64)
    table_line = np.full(cap, -1, dtype=np.int64)  # which line wrote the slot: no resets
    nxt = np.full(len(codes), -1, dtype=np.int64)
    for line in range(len(starts)):
        start, end = starts[line], ends[line]
        if end - start < min_len * (threshold + 1):
            continue
        size_mask = cap - 1
        widest = 0
        r = 0
        for x in range(start, end):
            if codes[x] == SPACE:
                r += 1
                if r > widest:
                    widest = r
            else:
                r = 0
        for x in range(end - gram, start - 1, -1):
            key = np.int64(codes[x])
            if gram == 2:
                key = key * 1114112 + np.int64(codes[x + 1])  # type: ignore[assignment]
            h = (key * np.int64(-7046029254386353131)) & size_mask
            while table_line[h] == line and table_key[h] != key:
                h = (h + 1) & size_mask
            nxt[x] = table_pos[h] if table_line[h] == line else -1
            table_line[h] = line
            table_key[h] = key
            table_pos[h] = x
        found = False
        for i in range(start, end - gram + 1):
            if codes[i] == SPACE:
                continue
            k = nxt[i]
            while k >= 0 and k - i <= max_len + 1 + widest:
                if threshold >= 2 and nxt[k] < 0:
                    break  # k is the gram's last occurrence: no room for a second repeat
                spaces = 0
                while k - spaces - 1 >= start and codes[k - spaces - 1] == SPACE:
                    spaces += 1
                low = max(min_len, k - i - spaces)
                high = min(max_len + 1, k - i)
                for size in range(low, high + 1):
                    if i + size * (threshold + 1) > end:
                        break
                    if _repeats_at(codes, i, size, k, end, threshold):
                        found = True
                        break
                if found:
                    break
                k = nxt[k]
            if found:
                break
        out[line] = found
    return out


class RepetitionConfig(PluginConfig):
    threshold: int = Field(2, ge=1, le=1000, description="repetitions (after the first) rejected")
    min_length: int = Field(3, ge=1, le=1000, description="shortest repeated unit")
    max_length: int = Field(100, ge=1, le=10_000, description="longest repeated unit, minus one")

    @model_validator(mode="after")
    def _order(self) -> RepetitionConfig:
        if self.max_length < self.min_length - 1:
            raise ValueError("max_length must be at least min_length - 1")
        return self


class RepetitionFilter(ArrayFilter):
    name = "repetition"
    Config = RepetitionConfig
    higher_is_better = False

    def setup(self, langs: tuple[str, ...], resources: object = None) -> None:
        super().setup(langs, resources)
        c = self.config
        self.pattern = regex.compile(
            f"(\\S.{{{c.min_length - 1},{c.max_length}}}?)(?: *\\1){{{c.threshold},}}"
        )

    def repetitions(self, text: str) -> int:
        """OpusFilter's score of one segment: repeats of the first match's unit."""
        match = self.pattern.search(text)
        return match.group(0).count(match.group(1)) - 1 if match else 0

    def column_scores(self, column: TextColumn) -> np.ndarray:
        c = self.config
        out = np.zeros(column.count, dtype=np.int64)
        if not column.count:
            return out
        hits = _candidates(
            column.codes,
            column.starts,
            column.ends,
            c.min_length,
            c.max_length,
            c.threshold,
        )
        lines = column.lines
        for row in np.flatnonzero(hits):
            out[row] = self.repetitions(lines[row])
        return out

    def score_block(self, block: TextBlock) -> np.ndarray:
        per_side = [self.column_scores(col) for col in block.columns]
        return np.max(np.stack(per_side, axis=1), axis=1) if per_side else np.zeros(0)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores) < self.config.threshold
