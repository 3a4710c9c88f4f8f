"""Repeated content (OpusFilter's ``RepetitionFilter``): a substring of ``min_length`` to
``max_length + 1`` characters, starting with a non-space, repeated at least ``threshold`` more
times in a row with optional spaces between, as the regex
``(\\S.{min-1,max}?)(?: *\\1){threshold,}``. Score: the number of repetitions of the first
match (0 if none), the maximum over the sides; kept when below the threshold.

That backtracking regex is most of OpusFilter's running time. Here a compiled scan over the
shard's code points finds the regex's own match: the leftmost start, the shortest unit there
(the lazy quantifier), its repeats taken greedily. It tries only the recurrences that begin with
the unit's first characters, following links between positions whose first characters hash
alike, and only from starts with two such links close enough; the score is then counted
on the matched code points as OpusFilter counts it (``group(0).count(group(1)) - 1``)."""

from __future__ import annotations

import numba
import numpy as np
import regex
from pydantic import Field, model_validator

from mtcore.api import PluginConfig, TextBlock, TextColumn
from mtcore_plugins.filters._array import ArrayFilter

SPACE = 32
# The regex module's \\s (Unicode White_Space, which is not quite str.isspace: U+001C..U+001F
# are not in it) over U+0000..U+3001; U+3001 is not a space and stands for every code point
# above the table, as in mtcore.text.block.
REGEX_SPACE = np.array([bool(regex.match(r"\s", chr(c))) for c in range(0x3002)], dtype=np.bool_)


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
def _match_end(codes: np.ndarray, i: int, size: int, k: int, end: int) -> int:
    """Where the greedy ``(?: *\\1)*`` after the unit ``codes[i:i+size]`` ends, its first
    recurrence being at ``k`` (already checked)."""
    last = k + size
    k = last
    while True:
        while k < end and codes[k] == SPACE:
            k += 1
        if k + size > end:
            return last
        for t in range(size):
            if codes[k + t] != codes[i + t]:
                return last
        k += size
        last = k


@numba.njit(cache=True, nogil=True)
def _first_matches(
    codes: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    min_len: int,
    max_len: int,
    threshold: int,
    space: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover (compiled)
    """Per line, the regex's match: start and unit size and end (start -1: none). A unit's
    recurrences start with the unit's first ``gram`` characters (three when units have at
    least three); :func:`_candidates` links each position to the next one whose gram hashes
    alike and keeps the starts with enough links close enough. Candidates are tried left to
    right, each recurrence ``k`` with every unit size that puts ``k`` right after the unit and
    its trailing spaces, sizes up, so the first hit is the regex's (leftmost, then lazy)."""
    first = np.full(len(starts), -1, dtype=np.int64)
    unit = np.zeros(len(starts), dtype=np.int64)
    stop = np.zeros(len(starts), dtype=np.int64)
    if not len(starts):
        return first, unit, stop
    gram = min(min_len, 3)
    longest = 1
    for line in range(len(starts)):
        longest = max(longest, ends[line] - starts[line])
    mask = 4095  # 32 KB of slots at least: few collisions, and it stays in cache
    while mask < 4 * longest + 1:
        mask = mask * 2 + 1
    # per hash, its latest position; positions grow line by line, so >= start: this line's
    last = np.full(mask + 1, -1, dtype=np.int64)
    nxt = np.full(longest + 1, -1, dtype=np.int64)  # per line, offsets from its start
    cand = np.zeros(longest + 1, dtype=np.int64)
    for line in range(len(starts)):
        start, end = starts[line], ends[line]
        if end - start < min_len * (threshold + 1):
            continue
        widest = _widest_spaces(codes, start, end)
        reach = 2 * (max_len + 1 + widest)  # from a unit's start to its second recurrence
        found = _candidates(codes, start, end, gram, threshold, reach, space, last, nxt, cand)
        for j in range(found - 1, -1, -1):
            i = cand[j]
            size, k = _first_unit(codes, i, start, end, nxt, min_len, max_len, threshold, widest)
            if size:
                first[line] = i
                unit[line] = size
                stop[line] = _match_end(codes, i, size, k, end)
                break
    return first, unit, stop


@numba.njit(cache=True, nogil=True)
def _widest_spaces(codes: np.ndarray, start: int, end: int) -> int:  # pragma: no cover
    """The longest run of spaces in ``codes[start:end]``."""
    widest = 0
    r = 0
    for x in range(start, end):
        if codes[x] == SPACE:
            r += 1
            if r > widest:
                widest = r
        else:
            r = 0
    return widest


@numba.njit(cache=True, nogil=True)
def _candidates(
    codes: np.ndarray,
    start: int,
    end: int,
    gram: int,
    threshold: int,
    reach: int,
    space: np.ndarray,
    last: np.ndarray,
    nxt: np.ndarray,
    cand: np.ndarray,
) -> int:  # pragma: no cover (compiled)
    """One pass right to left over a line: ``nxt`` links each position to the next one whose
    gram has the same hash (a superset of the gram's own occurrences: every candidate is
    compared in full; ``last`` holds each hash's latest position), and ``cand`` gets, right to
    left, the non-space positions with ``threshold`` such links within ``reach``. Returns how
    many it got."""
    top = len(space) - 1
    shift = 21 * (gram - 1)  # code points have 21 bits: three fit an int64 exactly
    mask = len(last) - 1
    key = np.int64(0)
    for g in range(gram - 1):
        key = (key << 21) | np.int64(codes[end - gram + 1 + g])
    key <<= 21
    found = 0
    for x in range(end - gram, start - 1, -1):
        key = (np.int64(codes[x]) << shift) | (key >> 21)
        # the product's high bits: its low ones depend on the key's low bits only
        h = ((key * np.int64(-7046029254386353131)) >> 40) & mask
        p = last[h]
        last[h] = x
        if p < start:
            nxt[x - start] = -1
            continue
        nxt[x - start] = p - start
        if threshold >= 2:
            after = nxt[p - start]
            if after < 0 or after - (x - start) > reach:
                continue  # no second recurrence within reach
        if space[min(codes[x], top)]:
            continue  # the unit starts with \S
        cand[found] = x
        found += 1
    return found


@numba.njit(cache=True, nogil=True)
def _first_unit(
    codes: np.ndarray,
    i: int,
    start: int,
    end: int,
    nxt: np.ndarray,
    min_len: int,
    max_len: int,
    threshold: int,
    widest: int,
) -> tuple[int, int]:  # pragma: no cover (compiled)
    """The shortest unit starting at ``i`` that recurs ``threshold`` times and where it first
    recurs (size 0: none), trying the linked positions ``k`` in order, each with the sizes
    that put ``k`` right after the unit and its spaces."""
    at = nxt[i - start]
    k = start + at
    while at >= 0 and k - i <= max_len + 1 + widest:
        if threshold >= 2 and nxt[at] < 0:
            return 0, 0
        spaces = 0
        while k - spaces - 1 >= start and codes[k - spaces - 1] == SPACE:
            spaces += 1
        for size in range(max(min_len, k - i - spaces), min(max_len + 1, k - i) + 1):
            if i + size * (threshold + 1) > end:
                break
            if _repeats_at(codes, i, size, k, end, threshold):
                return size, k
        at = nxt[at]
        k = start + at
    return 0, 0


@numba.njit(cache=True, nogil=True)
def _scores(
    codes: np.ndarray, first: np.ndarray, unit: np.ndarray, stop: np.ndarray
) -> np.ndarray:  # pragma: no cover (compiled)
    """Per line, ``group(0).count(group(1)) - 1`` of its match (0 without one): the unit's
    occurrences in the matched text, without overlaps, left to right, as ``str.count``."""
    out = np.zeros(len(first), dtype=np.int64)
    for line in range(len(first)):
        i, size, end = first[line], unit[line], stop[line]
        if i < 0:
            continue
        found = 0
        k = i
        while k + size <= end:
            t = 0
            while t < size and codes[k + t] == codes[i + t]:
                t += 1
            if t == size:
                found += 1
                k += size
            else:
                k += 1
        out[line] = found - 1
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


class RepetitionFilter(ArrayFilter[RepetitionConfig]):
    name = "repetition"
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

    def column_scores(self, column: TextColumn, rows: np.ndarray | None = None) -> np.ndarray:
        """Per line (of ``rows`` only, if given), the score of one column."""
        c = self.config
        starts, ends = column.starts, column.ends
        if rows is not None:
            starts, ends = starts[rows], ends[rows]
        if not len(starts):
            return np.zeros(0, dtype=np.int64)
        first, unit, stop = _first_matches(
            column.codes,
            starts,
            ends,
            c.min_length,
            c.max_length,
            c.threshold,
            REGEX_SPACE,
        )
        return _scores(column.codes, first, unit, stop)

    def score_block(self, block: TextBlock) -> np.ndarray:
        return self.score_rows(block, None)

    def score_rows(self, block: TextBlock, rows: np.ndarray | None) -> np.ndarray:
        per_side = [self.column_scores(col, rows) for col in block.columns]
        return np.max(np.stack(per_side, axis=1), axis=1) if per_side else np.zeros(0)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores) < self.config.threshold
